"""The tuner: spaces, strategies and the tuning session. Candidates are checked and timed by measure/'s
isolated benchmark workers, one per GPU; every outcome becomes a record in store/."""
