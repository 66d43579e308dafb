"""The operator surface: topology, lag, replays, metrics, health."""
