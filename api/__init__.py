"""The event-producing HTTP edge: validates requests, writes commands to topics, owns no database."""
