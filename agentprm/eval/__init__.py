"""Stage 5 — evaluation: success rates with confidence intervals, per task type."""
