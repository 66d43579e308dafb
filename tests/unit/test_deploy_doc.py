"""docs/deploy.md's settings table is the code's (``streams.runtime.settings.SETTINGS``): a
setting added, renamed or given another default changes the page too."""

from streams.runtime import settings
from streams.runtime.settings import REPO_ROOT


def test_the_deploy_pages_settings_table_is_the_codes() -> None:
    doc = (REPO_ROOT / "docs" / "deploy.md").read_text()
    block = doc.split("<!-- settings:begin -->\n", 1)[1].split("\n<!-- settings:end -->", 1)[0]
    assert block == settings.markdown_table()


def test_every_secret_can_come_from_a_file_and_is_named_so() -> None:
    table = settings.markdown_table()
    for name in settings.SECRETS:
        if any(s.name == name for s in settings.SETTINGS):
            assert f"`{name}` (or `{name}_FILE`)" in table
