package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pglock/pglock/internal/ops"
)

// doctor's exit codes, as the issue asked: warnings 1, problems 2.
const (
	exitWarnings = 1
	exitProblems = 2
)

func (a *app) doctorCommand() *cobra.Command {
	var opts ops.DoctorOptions
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check the installation and explain each problem with its fix (exit 1: warnings, 2: problems)",
		Long: "Checks, in order: the schema's version and drift; lock rows and queue places expired for longer\n" +
			"than --grace (awaiting gc); elections without a leader for longer than --grace while candidates\n" +
			"wait; statement and idle-in-transaction timeouts that cut pglock short; schedules no instance\n" +
			"runs; planner statistics that call a table empty when it is not; advisory locks held by\n" +
			"sessions idle for longer than --advisory-held; instances' clock offsets; parts of pglock the\n" +
			"role is granted only in part; a pooler between. Each check prints its verdict, and its fix\n" +
			"when there is one. Exits 0 when all is well, 1 with warnings, 2 with problems.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Grace < 0 || opts.AdvisoryHeld < 0 {
				return usagef("--grace and --advisory-held must not be negative")
			}
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				findings, err := ops.Diagnose(ctx, pool, opts)
				if err != nil {
					return err
				}
				if a.output == "json" {
					err = writeJSON(a.stdout, struct {
						Findings []ops.Finding `json:"findings"`
					}{findings})
				} else {
					for _, f := range findings {
						if _, err = fmt.Fprintf(a.stdout, "%-8s %-13s %s\n", f.Severity, f.Check, f.Detail); err == nil && f.Fix != "" {
							_, err = fmt.Fprintf(a.stdout, "%-8s %-13s fix: %s\n", "", "", f.Fix)
						}
						if err != nil {
							break
						}
					}
				}
				if err != nil {
					return err
				}
				return verdict(findings)
			})
		},
	}
	cmd.Flags().DurationVar(&opts.Grace, "grace", ops.DefaultDoctorGrace, "how long a row may stay expired, or an election leaderless, before it counts")
	cmd.Flags().DurationVar(&opts.AdvisoryHeld, "advisory-held", ops.DefaultAdvisoryHeld, "how long an idle session may hold an advisory lock before it counts")
	return cmd
}

// verdict is doctor's exit: nil when all is well, else the exit code of the worst finding
// (printed already, so the error says only how many).
func verdict(findings []ops.Finding) error {
	var warnings, problems int
	for _, f := range findings {
		switch f.Severity {
		case ops.SeverityWarning:
			warnings++
		case ops.SeverityProblem:
			problems++
		}
	}
	switch {
	case problems > 0:
		return exitError{exitProblems, fmt.Errorf("doctor: %d problems, %d warnings", problems, warnings)}
	case warnings > 0:
		return exitError{exitWarnings, fmt.Errorf("doctor: %d warnings", warnings)}
	}
	return nil
}
