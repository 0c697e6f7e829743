"""A real headless Chromium (Debian's ``chromium`` + ``chromium-driver``) driven by selenium.

No browser is downloaded: the driver and the browser are the system's
(``tests/system-deps.sh`` installs them); a missing one FAILS the test. The
browser's console is recorded (``goog:loggingPrefs``) so a test can assert that a
page logged no error (a script error, a failed request, a CSP violation).
"""

from __future__ import annotations

import contextlib
import shutil
import time

import pytest

CHROMIUM = ("chromium", "chromium-browser")
DRIVER = "chromedriver"


def _which(names) -> str:
    for n in names:
        p = shutil.which(n)
        if p:
            return p
    pytest.fail(f"{' or '.join(names)} not found: run tests/system-deps.sh (Debian packages chromium, "
                "chromium-driver); the browser tests are never skipped", pytrace=False)


@contextlib.contextmanager
def chromium(width: int = 1400, height: int = 1000):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = _which(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--disable-extensions", "--disable-background-networking",
                f"--window-size={width},{height}"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=_which([DRIVER])), options=opts)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver) -> list[str]:
    """Console entries at SEVERE (errors, failed loads, CSP violations) since the last call."""
    return [f"{e.get('source', '')}: {e['message']}" for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def wait_for(driver, script: str, timeout: float = 20.0, what: str = ""):
    """Poll a JavaScript expression until it is truthy (bounded); returns its value."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = driver.execute_script(f"return ({script});")
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what or script} (last value {value!r}); "
                         f"console: {console_errors(driver)}")
