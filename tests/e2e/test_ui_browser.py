"""`tpuctl ui` in a real headless browser: Debian's Chromium driven by Selenium through Debian's
chromedriver (named explicitly: Selenium Manager never downloads anything). `make test-browser`
installs both (apt) and runs this file; `make test` leaves it out (marked browser).

The records and the server are tests/e2e/ui_records.py's; the browser signs in as a user does, by
opening the URL `tpuctl ui` printed (its token), and keeps the cookie. Screenshots go to the
test's directory for a person to look at (and to docs/img/ when TPUCTL_UI_SCREENSHOTS_TO_DOCS=1,
which is how the docs' images were made).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.e2e.ui_records import (  # noqa: F401 - fixtures
    ESTIMATED,
    HOSTILE,
    NO_ESTIMATE_WHY,
    TIMELINE_RUN,
    UNESTIMATED,
    records,
    ui,
)
from tests.unit.test_goodput import EXPECTED

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1500", "--lang=en-US"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=opts)
    yield driver
    driver.quit()


def _rendered(driver, hash_: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 20).until(lambda d: d.find_element("tag name", "body").get_attribute("data-rendered")
                                    == hash_)


def _open(driver, url: str, hash_: str) -> None:
    driver.get(url + hash_)
    _rendered(driver, hash_)


def _sign_in(driver, url: str, token: str, hash_: str) -> None:
    """Open the printed URL, as a user pastes it: the page shows, and the token leaves the address bar."""
    _open(driver, f"{url}?token={token}", hash_)
    assert driver.current_url == url + hash_


def _shot(driver, tmp_path: Path, name: str) -> Path:
    out = tmp_path / name
    driver.save_screenshot(str(out))
    if os.environ.get("TPUCTL_UI_SCREENSHOTS_TO_DOCS") == "1":
        shutil.copy(out, REPO / "docs" / "img" / name)
    return out


def test_the_run_page_shows_the_curve_the_preemption_on_its_timeline_and_the_spend(ui, browser, tmp_path):  # noqa: F811 - the fixture imported above
    url, token, (run_id, _sweep_id, store) = ui
    _sign_in(browser, url, token, f"#/run/{run_id}")
    page = browser.find_element("id", "main")
    text = page.text
    assert f"run {run_id}" in text and "finished" in text and "bert-finetune on lab (v3-8" in text
    loss = browser.find_element("css selector", "polyline[data-name=loss]")
    assert len(loss.get_attribute("points").split()) >= 4          # a curve, not a point
    assert browser.find_elements("css selector", "polyline[data-name=eval_accuracy]")
    # the timeline: one preemption, its recreation and resume, and the lost time shaded between
    assert len(browser.find_elements("css selector", "svg.timeline line[data-event=preempted]")) == 1
    assert len(browser.find_elements("css selector", "svg.timeline line[data-event=recreated]")) == 1
    assert len(browser.find_elements("css selector", "svg.timeline line[data-event=finished]")) == 1
    [lost] = browser.find_elements("css selector", "svg.timeline rect.lost")
    assert float(lost.get_attribute("width")) > 2
    # the spend: the run's time by state at the v3-8's preemptible list price
    rec = store.load()
    assert rec.seconds_by_state.get("training", 0) > 0
    rows = {r.find_elements("tag name", "td")[0].text: r.text for r in browser.find_elements(
        "xpath", "//h2[.='spend by state']/following-sibling::table[1]//tbody/tr")}
    assert "training" in rows and "$" in rows["training"], rows
    assert "tensorboard --logdir " + str(tmp_path / "model") + "/tb" in text
    # the goodput: its share and the badput by cause in seconds and dollars, as tpuctl cost RUN computes
    # them (the same ledger and prices), and the preemption's phases on the timeline and in a table
    g = _goodput(run_id)
    assert _card(browser, "goodput").startswith(f"goodput\n{g['goodput_pct']:.1f}%\n"), _card(browser, "goodput")
    assert _card(browser, "badput").endswith("at the run's prices")
    causes = {r.find_elements("tag name", "td")[0].text.strip(): r.find_elements("tag name", "td")
              for r in browser.find_elements("xpath", "//h2[.='goodput']/following-sibling::table[1]//tbody/tr")}
    bad = {k for k, v in g["categories"].items() if k != "goodput" and v["seconds"] > 0}
    assert set(causes) == bad and len(bad) >= 3, (causes, g["categories"])
    for key, tds in causes.items():
        assert tds[1].text == g["categories"][key]["google"] and "$" in tds[3].text, key
    shown = {s.get_attribute("data-category") for s in browser.find_elements("css selector", "svg.timeline rect.seg")}
    assert shown == bad | {"goodput"}, shown
    [pre] = g["preemptions"]
    phases = [p["phase"] for p in pre["phases"] if p["recorded"]]
    drawn = [r.get_attribute("data-phase") for r in browser.find_elements("css selector", "svg.timeline rect.phase")]
    assert drawn == phases and "recreate" in drawn, (drawn, phases)
    rows = browser.find_elements("xpath", "//h2[.='preemptions by phase']/following-sibling::table[1]//tbody/tr")
    assert [r.find_elements("tag name", "td")[1].text.strip() for r in rows] == phases
    assert rows[0].text.startswith("preemption 1 (")
    # the record's hostile text is shown as text: no element made from it, no script run
    assert HOSTILE in text and not browser.find_elements("css selector", "#main img")
    assert browser.title == "tpuctl"
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"], browser.get_log("browser")
    _shot(browser, tmp_path, "ui-run.png")


def _dur(s: float) -> str:
    """A duration as the page writes one (app.js dur): 45s, 5m07s, 1h02m."""
    s = round(s)
    if s < 60:
        return f"{s}s"
    return f"{s // 60}m{s % 60:02d}s" if s < 3600 else f"{s // 3600}h{s % 3600 // 60:02d}m"


def _money(v: float) -> str:
    """Dollars as the page writes them (app.js money): $1.23, $0.012 under a dime."""
    return f"${v:.2f}" if v >= 0.1 else f"${float(f'{v:.2g}')}"


def test_the_goodput_reads_as_cost_run_computes_it_and_each_preemption_shows_its_phases(ui, browser, tmp_path):  # noqa: F811 - the fixture imported above
    """The hand-built timeline of tests/unit/test_goodput.py (preempted with the notice, then hard):
    every category to the second, its dollars, both preemptions' phases on the timeline and listed."""
    url, token, _records = ui
    _sign_in(browser, url, token, f"#/run/{TIMELINE_RUN}")
    g = _goodput(TIMELINE_RUN, "bench")
    assert {k: v["seconds"] for k, v in g["categories"].items()} == EXPECTED
    assert _card(browser, "goodput") == "goodput\n51.5%\n2m50s of 5m30s on steps that were kept"
    assert _card(browser, "badput") == f"badput\n2m40s\n{_money(g['badput_usd'])} at the run's prices"
    assert _card(browser, "recovery") == "recovery\n1m02s, 30s\neach preemption, seen to its first new step"
    rows = [[td.text.strip() for td in r.find_elements("tag name", "td")] for r in
            browser.find_elements("xpath", "//h2[.='goodput']/following-sibling::table[1]//tbody/tr")]
    bad = sorted(((k, s) for k, s in EXPECTED.items() if k != "goodput" and s > 0), key=lambda kv: -kv[1])
    assert [r[0] for r in rows] == [k for k, _s in bad]
    for (key, secs), row in zip(bad, rows):
        c = g["categories"][key]
        assert row[1:] == [c["google"], _dur(secs), _money(c["usd"]), f"{100 * secs / 330:.1f}%"], row
    # the timeline: the wall time by cause under the axis, and each preemption's phases in order
    segs = browser.find_elements("css selector", "svg.timeline rect.seg")
    assert {s.get_attribute("data-category") for s in segs} == {k for k, s in EXPECTED.items() if s > 0}
    phases = [(n + 1, ph["phase"]) for n, p in enumerate(g["preemptions"]) for ph in p["phases"] if ph["recorded"]]
    drawn = [(int(r.get_attribute("data-preemption")), r.get_attribute("data-phase"))
             for r in browser.find_elements("css selector", "svg.timeline rect.phase")]
    assert drawn == phases and len(phases) == 13
    listed = [[td.text.strip() for td in r.find_elements("tag name", "td")] for r in
              browser.find_elements("xpath", "//h2[.='preemptions by phase']/following-sibling::table[1]//tbody/tr")]
    assert listed[0] == ["preemption 1 (notice, checkpointed in it; 0 steps redone)", "last step to job exit", "5s"]
    assert listed[4] == ["", "recreate", "25s"]
    assert listed[8] == ["preemption 2 (no notice seen; 2 steps redone)", "seen to recreate started", "5s"]
    assert [row[1] for row in listed] == [p for _n, p in phases]
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"], browser.get_log("browser")
    browser.execute_script("arguments[0].scrollIntoView()", browser.find_element("xpath", "//h2[.='timeline']"))
    _shot(browser, tmp_path, "ui-goodput.png")


def _goodput(run_id: str, cluster: str = "lab") -> dict:
    """The run's breakdown as ``tpuctl cost RUN --json`` has it (a finished run: it no longer moves)."""
    import time

    from provision.basics.config import Target, home
    from provision.billing.costs import cluster_cost
    from provision.cloud.local import LocalProvider

    report = cluster_cost(LocalProvider(home()), Target(provider="local", project=None, zone=None), cluster, None,
                          now=time.time(), run_ids={run_id})
    return next(r.goodput for r in report.runs if r.run_id == run_id)


def _card(driver, key: str) -> str:
    [card] = driver.find_elements("xpath", f"//div[@class='card'][div[@class='k']='{key}']")
    return card.text


def test_the_estimate_reads_as_time_and_dollars_and_tiny_values_keep_their_digits(ui, browser, tmp_path):  # noqa: F811 - the fixture imported above
    url, token, _records = ui
    _sign_in(browser, url, token, f"#/run/{ESTIMATED}")
    text = browser.find_element("id", "main").text
    # the estimate: its time and dollars, the TPU and tier, its speed's source, when it was made
    est = _card(browser, "estimate")
    assert "1h02m, $1.23" in est and "v2-8 preemptible in us-central1-b" in est, est
    assert "measured speed, 0.0806 steps/s" in est and "made 11/27/2026" in est, est
    assert "measured: 0.0806 steps/s over 900 steps" in text           # its basis, under the cards
    for raw in ("accelerator_type", "compute_s", "cheapest", "1.796e", "true"):
        assert raw not in text, raw
    # a loss of 7e-13 keeps its digits, on the card and on the chart's axis: never 0.0000
    assert _card(browser, "loss") == "loss\n7.0e-13" and "0.0000" not in text
    axis = [t.text for t in browser.find_elements("css selector", "svg.chart[data-series=loss] text")]
    assert "7.0e-13" in axis and "1.76e-10" in axis, axis
    # eval_accuracy, measured once: its dot and its value, not an empty chart
    chart = browser.find_element("css selector", "svg.chart[data-series=eval_accuracy]")
    assert chart.find_elements("css selector", "circle[data-name=eval_accuracy]")
    assert chart.find_element("css selector", "text[data-name=eval_accuracy]").text == "eval_accuracy 0.9123 at step 300"
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"], browser.get_log("browser")
    _shot(browser, tmp_path, "ui-estimate.png")
    # no estimate made: the card says so, and why
    _open(browser, url, f"#/run/{UNESTIMATED}")
    none = _card(browser, "estimate")
    assert none.startswith("estimate\nnone\n" + NO_ESTIMATE_WHY) and "made 11/27/2026" in none, none
    # the overview's loss column too
    _open(browser, url, "#/")
    [row] = [r.text for r in browser.find_elements("css selector", "tr") if ESTIMATED in r.text]
    assert "300/300 7.0e-13" in row, row


def test_the_sweep_page_shows_the_trials_the_best_marked_and_each_hyperparameter(ui, browser, tmp_path):  # noqa: F811 - the fixture imported above
    url, token, (_run_id, sweep_id, _store) = ui
    _sign_in(browser, url, token, "#/")
    _open(browser, url, f"#/sweep/{sweep_id}")                # the cookie, from here on
    rows = browser.find_elements("xpath", "//h2[.='trials']/following-sibling::table[1]//tbody/tr")
    assert [r.find_elements("tag name", "td")[0].text for r in rows] == ["0", "\u2605 1", "2", "3"]
    [best] = browser.find_elements("css selector", "tr.best")
    assert "0.8600" in best.text and "0.00003" in best.text
    scatters = {s.get_attribute("data-param"): s for s in browser.find_elements("css selector", "svg.scatter")}
    assert set(scatters) == {"learning_rate", "train_batch_size"}
    assert len(scatters["learning_rate"].find_elements("css selector", "circle")) == 3   # the pruned one has no metric
    assert len(scatters["learning_rate"].find_elements("css selector", "circle.best")) == 1
    _shot(browser, tmp_path, "ui-sweep.png")
    _open(browser, url, "#/")
    _shot(browser, tmp_path, "ui-overview.png")
    text = browser.find_element("id", "main").text
    assert "lab READY v3-8" in text and sweep_id in text and "trial 1: 0.8600" in text, text


def test_without_the_printed_url_the_page_shows_nothing_but_how_to_get_in(ui, browser):  # noqa: F811 - the fixture imported above
    url, token, (run_id, _sweep_id, _store) = ui
    browser.get(url + f"#/run/{run_id}")
    text = browser.find_element("tag name", "body").text
    assert "open the URL it printed" in text and f"tpuctl ui: serving {url}?token=..." in text, text
    assert run_id not in text and token not in browser.page_source
    browser.get(f"{url}?token={token[:-1]}")                   # a token mistyped
    assert "open the URL it printed" in browser.find_element("tag name", "body").text
    # a link to the printed URL followed from another page (the browser withholds a SameSite=Strict
    # cookie through a redirect then): signed in all the same, the token not kept in the address bar
    browser.get("data:text/html,<a id=go href='" + f"{url}?token={token}" + "'>tpuctl ui</a>")
    browser.find_element("id", "go").click()
    _rendered(browser, "#/")
    assert browser.current_url == url
    assert "lab READY v3-8" in browser.find_element("id", "main").text
