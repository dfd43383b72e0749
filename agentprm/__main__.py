"""`python -m agentprm ...` = the `agentprm` command (for scripts that run it under a given interpreter)."""
import sys

from agentprm.cli import main

sys.exit(main())
