"""CLI glue: one module per `agentprm` sub-command; the work itself lives in the stage packages."""
