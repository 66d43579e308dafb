"""Mutation check (issue 48): each guarantee of the README's table has a scripted mutation of its
mechanism (``table.MUTATIONS``) that must turn its named test red. Run on demand, never by
``./dev test``: ``./dev test --mutations [NAME ...]`` (``python -m tests.mutations``)."""
