"""The tuner: spaces, strategies, the tuning key and the session loop. The caller passes the executor that
compiles and measures (dispatch.py here, or tilebench.cluster) and the observers that show progress; every
outcome becomes a record in store/."""
