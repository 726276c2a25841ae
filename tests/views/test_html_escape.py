"""`inspect --html` renders whatever a model writes: text that would open an HTML comment or a
script inside the embedded data (`<!--<script>`) is data, and the whole page still draws."""

from __future__ import annotations

from subagentd.storage.database import SqliteStore
from subagentd.view.page import render as page_of
from tests.core_host import CoreHost
from tests.views.test_html import browser, render  # noqa: F401  (the fixture)

NASTY = ["<!--<script>", "<!--", "<script>", "-->", "</script", "]]>", "&lt;", "\u2028\u2029"]


def test_no_text_can_open_a_comment_or_a_script_in_the_embedded_data():
    text = page_of({"agents": [{"label": "".join(NASTY)}]}, "t")
    data = text[text.index('{"agents"') :]
    assert "<" not in data.split("</script>")[0]  # not one `<` before the script's own end


def test_a_model_written_comment_opener_leaves_the_page_drawn(browser, tmp_path):  # noqa: F811
    db = str(tmp_path / "odd.db")
    core = CoreHost(store=SqliteStore(db))
    with core.svc.transaction():
        core.open("root")
        core.spawn("root", "c1", label="<!--<script>", prompt="<!--<script> and more")
        core.spawn("root", "c2", label="after it")
        core.end("c1", output="<!--<script>done")
    core.svc.commit()
    core.store.conn.close()
    page = tmp_path / "odd.html"
    render(db, page)
    browser.open(page.as_uri())
    assert browser.problems() == []
    names = browser.evaluate("document.getElementById('names').textContent")
    assert "<!--<script>" in names and "after it" in names
    assert (
        browser.evaluate("document.querySelectorAll('#lanes rect.turn').length") == 3
    )  # c1, c2, root
