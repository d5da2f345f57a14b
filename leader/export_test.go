package leader

import (
	"time"

	"github.com/pglock/pglock/internal/backoff"
)

// SetCampaignBackoff makes e wait at most d before campaigning again after a short term or a
// failed campaign. A test of many handovers ends every term at once on purpose, and would
// otherwise wait up to campaignBackoff's 5 s a round; set it before Run.
func SetCampaignBackoff(e *Elector, d time.Duration) {
	e.backoff = backoff.Capped{First: d, Max: d}
}
