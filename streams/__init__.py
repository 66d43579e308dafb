"""cronstream's stream processing: the faust app, its agents, and the pure logic they call."""
