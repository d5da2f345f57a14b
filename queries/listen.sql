-- ListenHandoff subscribes to the handoffs release_lock makes (JSON naming the new holder).
-- name: ListenHandoff :exec
LISTEN pglock_handoff;

-- ListenReleased subscribes to locks freed with nobody waiting (payload: the lock name).
-- name: ListenReleased :exec
LISTEN pglock_released;
