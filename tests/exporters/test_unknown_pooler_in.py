"""``unknown_pooler_in``: the one search, shared by export and the fold loader of predict, serve and explain, for the
registry's UnknownPoolerError among the errors an exception was raised from or while handling."""

from __future__ import annotations

from attnpool.pooling.registry import UnknownPoolerError, unknown_pooler_in


def test_the_registrys_error_is_found_through_causes_and_contexts_and_a_cycle_ends_the_search():
    unknown = UnknownPoolerError("Unknown pooler 'x'")
    try:
        try:
            raise unknown
        except UnknownPoolerError:
            raise OSError("wrapped while handling") from None  # no cause: the context is suppressed, still kept
    except OSError as outer:
        wrapped = outer
    assert unknown_pooler_in(RuntimeError("nothing inside")) is None
    top = RuntimeError("from transformers")
    top.__cause__ = wrapped
    assert unknown_pooler_in(top) is unknown
    looped = ValueError("a")
    looped.__context__ = ValueError("b")
    looped.__context__.__context__ = looped
    assert unknown_pooler_in(looped) is None
