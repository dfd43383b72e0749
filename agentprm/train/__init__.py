"""One training core (`core.train`) that SFT, PRM and policy-update losses plug into."""
