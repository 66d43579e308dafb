"""``streams.runtime.library_patch``: a library's method wrapped once, however often installed."""

from __future__ import annotations

from typing import Any

from streams.runtime import library_patch


def test_a_wrapper_installed_twice_wraps_the_librarys_own_method_once() -> None:
    class Library:
        def answer(self) -> list[str]:
            return ["library"]

    own = Library.answer

    def install() -> None:
        original = library_patch.original(Library, "answer")

        def answer(self: Any) -> list[str]:
            return ["wrapper", *original(self)]

        library_patch.replace(Library, "answer", answer)

    assert library_patch.original(Library, "answer") is own  # nothing wrapped yet
    install()
    install()
    assert Library().answer() == ["wrapper", "library"]  # not stacked
    assert library_patch.original(Library, "answer") is own
    assert Library.answer.unwrapped is own  # type: ignore[attr-defined]
