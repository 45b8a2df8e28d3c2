"""The page of `tinydelta serve` in headless Chromium, driven through WebDriver (selenium with
Debian's chromium and chromium-driver; nothing downloaded). Run by tests/cli/serve.rs:

    python serve_page.py TINYDELTA WORKDIR SCREENSHOT_DIR REPO

Scenarios: load the page; drag the timeline to version 1 and read its rows; compare two
versions; a commit made by the CLI appears without a reload; with --writable a bad file dropped
shows append's error (line and column) and commits nothing, a good one commits. Screenshots go
to SCREENSHOT_DIR (printed). Exits non-zero on the first failure.
"""

import json
import os
import subprocess
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select, WebDriverWait

BIN, WORK, SHOTS, REPO = (os.path.abspath(a) for a in sys.argv[1:5])
os.makedirs(SHOTS, exist_ok=True)
table = os.path.join(WORK, "orders")
ex = lambda f: os.path.join(REPO, "examples", f)


def td(*args, check=True):
    r = subprocess.run([BIN, *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise SystemExit(f"tinydelta {' '.join(args)} failed: {r.stderr}")
    return r


def latest():
    return json.loads(td("describe", table, "--json").stdout)["version"]


td("create", table, "id:int!", "region:str", "year:int")
td("append", table, "--file", ex("orders.jsonl"))
td("overwrite", table, "--file", ex("orders-2025.jsonl"))

server = subprocess.Popen([BIN, "serve", table, "--writable"], stdout=subprocess.PIPE, text=True)
url = server.stdout.readline().split()[-1]
print("page:", url)

opts = webdriver.ChromeOptions()
opts.binary_location = "/usr/bin/chromium"
for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
          "--disable-component-update", "--disable-sync", "--no-first-run",
          "--disable-dev-shm-usage", "--window-size=1280,1000",
          f"--user-data-dir={os.path.join(WORK, 'chromium-profile')}"]:
    opts.add_argument(a)
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
wait = WebDriverWait(driver, 15, poll_frequency=0.05)
shot_n = [0]


def shot(name):
    shot_n[0] += 1
    p = os.path.join(SHOTS, f"{shot_n[0]:02d}-{name}.png")
    driver.save_screenshot(p)
    print("screenshot:", p)


def text(id_):
    return driver.find_element(By.ID, id_).text


def grid_rows(id_="grid"):
    return [[td_.text for td_ in tr.find_elements(By.TAG_NAME, "td")]
            for tr in driver.find_elements(By.CSS_SELECTOR, f"#{id_} tbody tr")]


def check(cond, what):
    if not cond:
        shot("FAILED")
        raise SystemExit("FAILED: " + what)
    print("ok:", what)


try:
    # 1. Load the page: the latest version (2) with its 3 rows.
    driver.get(url)
    wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
    wait.until(lambda d: len(grid_rows()) == 3)
    check(text("version-label") == "2", "the page opens at the latest version")
    check(driver.find_element(By.ID, "error").get_attribute("hidden") is not None, "no error shown")
    first_ms = driver.execute_script("return window.tdTimings.firstRowsMs")
    print(f"timing: first rows of the grid {first_ms:.1f} ms after navigation start")
    shot("loaded")

    # 2. Drag the timeline to version 1 and read its rows.
    slider = driver.find_element(By.ID, "timeline")
    w = slider.size["width"]
    ActionChains(driver).move_to_element_with_offset(slider, w // 2 - 3, 0).click_and_hold() \
        .move_by_offset(-(w // 2 - 3), 0).release().perform()
    wait.until(lambda d: text("version-label") == "1")
    wait.until(lambda d: len(grid_rows()) == 8)
    rows = grid_rows()
    heads = [th.text for th in driver.find_elements(By.CSS_SELECTOR, "#grid thead th")]
    check(heads[:3] == ["#", "id", "region"], f"the grid's columns are the schema's: {heads}")
    want = [json.loads(l) for l in td("read", table, "--version", "1").stdout.splitlines()]
    check([r[1] for r in rows] == [str(x["id"]) for x in want], "version 1's rows are read's rows")
    check("APPEND" in text("version-info") and "+8 rows" in text("version-info"), "the timeline says the commit")
    shot("version-1")

    # 3. Compare versions 1 and 2.
    Select(driver.find_element(By.ID, "from")).select_by_value("1")
    Select(driver.find_element(By.ID, "to")).select_by_value("2")
    driver.find_element(By.ID, "compare").click()
    wait.until(lambda d: "rows deleted" in text("changes-summary"))
    check("8 rows deleted, 3 rows inserted" in text("changes-summary"), text("changes-summary"))
    kinds = [r[0] for r in grid_rows("changes-grid")]
    check(kinds.count("delete") == 8 and kinds.count("insert") == 3, f"the changes listed: {kinds}")
    driver.execute_script("document.getElementById('compare-box').scrollIntoView()")
    shot("compare")

    # 4. Back to the latest, then a commit by the CLI appears without a reload.
    driver.execute_script("window.scrollTo(0, 0)")
    slider.send_keys(Keys.END)
    wait.until(lambda d: text("version-label") == "2")
    driver.execute_script("window.tdMarker = 1")  # gone if the page reloads
    td("append", table, "--file", ex("orders-2025.jsonl"))
    t0 = time.monotonic()
    wait.until(lambda d: text("version-label") == "3" and len(grid_rows()) == 6)
    print(f"timing: the CLI's commit shown {1000 * (time.monotonic() - t0):.0f} ms after append returned")
    check(driver.execute_script("return window.tdMarker") == 1, "no reload")
    shot("live-commit")

    # 5. Drop a bad file: append's messages, nothing committed.
    up = driver.find_element(By.ID, "upload")
    up.send_keys(ex("orders-bad.jsonl"))
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#append-result li.bad"))
    msgs = [li.text for li in driver.find_elements(By.CSS_SELECTOR, "#append-result li")]
    check(any('line 2, column "year"' in m for m in msgs), f"the error names line and column: {msgs}")
    check(latest() == 3, "nothing committed")
    driver.execute_script("document.getElementById('write-box').scrollIntoView()")
    shot("bad-drop")

    # 6. Drop a good file: the new version.
    up.send_keys(ex("orders.jsonl"))
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#append-result li.ok"))
    check("as version 4" in text("append-result"), text("append-result"))
    wait.until(lambda d: text("version-label") == "4")
    check(latest() == 4, "committed as version 4")
    shot("good-drop")

    # 7. Restore to version 1 with the confirmation.
    driver.execute_script("window.scrollTo(0, 0)")
    slider.send_keys(Keys.HOME)
    for _ in range(1):
        slider.send_keys(Keys.ARROW_RIGHT)
    wait.until(lambda d: text("version-label") == "1")
    wait.until(lambda d: len(grid_rows()) == 8)
    driver.find_element(By.ID, "restore").click()
    wait.until(lambda d: d.switch_to.alert)
    driver.switch_to.alert.accept()
    wait.until(lambda d: "restored" in text("restore-result"))
    wait.until(lambda d: text("version-label") == "5")
    check(td("read", table).stdout == td("read", table, "--version", "1").stdout, "restored to version 1")
    print("all browser scenarios passed")
finally:
    driver.quit()
    server.kill()
    server.wait()
