"""A pytest plugin: a parametrised test must not pass by skipping every case (tests/conftest.py loads it).

Cases skipped at setup (the `cuda` marker and skipif conditions: the device they need is absent) never count. A case
that got past setup and then skipped itself inside the test (pytest.skip) ran nothing; when every case of a test that
got past setup did that, the test's last case is reported as a failure.
"""
import pytest


class _RanNothing:
    remaining: dict = {}  # test (its node id without the parameters) -> cases not yet reported
    ran: dict = {}        # test -> whether a case ran to a pass or a failure
    skipped: dict = {}    # test -> reasons its cases skipped themselves

    @staticmethod
    def key(item):
        return item.nodeid.split("[", 1)[0] if getattr(item, "callspec", None) is not None else None

    @classmethod
    def collect(cls, items):
        cls.remaining.clear(), cls.ran.clear(), cls.skipped.clear()
        for item in items:
            if cls.key(item) is not None:
                cls.remaining[cls.key(item)] = cls.remaining.get(cls.key(item), 0) + 1

    @classmethod
    def report(cls, item, rep):
        key = cls.key(item)
        if key not in cls.remaining:
            return
        if rep.when == "call":
            if rep.skipped and not hasattr(rep, "wasxfail"):  # an xfail ran: it failed as expected
                reason = rep.longrepr[-1] if isinstance(rep.longrepr, tuple) else rep.longrepr
                cls.skipped.setdefault(key, []).append(str(reason))
            else:
                cls.ran[key] = True
        if not (rep.when == "call" or (rep.when == "setup" and not rep.passed)):
            return  # a case's last report: its call, or a setup that failed or skipped
        cls.remaining[key] -= 1
        if cls.remaining[key] == 0 and cls.skipped.get(key) and not cls.ran.get(key):
            rep.outcome = "failed"
            rep.longrepr = (f"{key}: every case that could run skipped itself, so the test checked nothing "
                            f"(first reason: {cls.skipped[key][0]})")


def pytest_collection_finish(session):
    _RanNothing.collect(session.items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _RanNothing.report(item, outcome.get_result())
