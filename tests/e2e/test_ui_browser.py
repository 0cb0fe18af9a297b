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
from tests.e2e.ui_records import ESTIMATED, HOSTILE, NO_ESTIMATE_WHY, UNESTIMATED, records, ui  # noqa: F401 - fixtures

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
    # the record's hostile text is shown as text: no element made from it, no script run
    assert HOSTILE in text and not browser.find_elements("css selector", "#main img")
    assert browser.title == "tpuctl"
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"], browser.get_log("browser")
    _shot(browser, tmp_path, "ui-run.png")


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
