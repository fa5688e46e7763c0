"""Tests of the structexec pytest plugin's fixtures (docs/testing.md)."""

from __future__ import annotations

import threading

import pytest
import trio

import structexec as sx
from structexec.testing import (
    LeakReport,
    ManualScheduler,
    RecordingReceiver,
    TerminateRecorder,
    ThreadScheduler,
)

pytest_plugins = ["pytester"]


def test_recording_receiver_fixture(sx_recording_receiver: RecordingReceiver) -> None:
    assert isinstance(sx_recording_receiver, RecordingReceiver)
    sx_recording_receiver.run(sx.just(1))
    assert sx_recording_receiver.value == (1,)


def test_make_receiver_fixture(sx_make_receiver: object) -> None:
    a = sx_make_receiver()  # type: ignore[operator]
    b = sx_make_receiver(extra_env=sx.prop(sx.get_scheduler, sx.inline_scheduler()))  # type: ignore[operator]
    assert a is not b
    assert sx.get_scheduler(b.get_env()) == sx.inline_scheduler()


def test_manual_scheduler_fixture(sx_manual_scheduler: ManualScheduler) -> None:
    rec = RecordingReceiver()
    rec.run(sx.schedule(sx_manual_scheduler))
    assert sx_manual_scheduler.pending == 1
    sx_manual_scheduler.drain()
    assert rec.value == () and rec.scheduler is sx_manual_scheduler


def test_thread_scheduler_fixture(sx_thread_scheduler: ThreadScheduler) -> None:
    rec = RecordingReceiver()
    seen: list[int] = []
    rec.run(sx.schedule(sx_thread_scheduler) | sx.then(lambda: seen.append(threading.get_ident())))
    rec.wait()
    assert seen == [sx_thread_scheduler.ident] and rec.thread == sx_thread_scheduler.ident
    assert seen[0] != threading.get_ident()
    assert rec.scheduler is sx_thread_scheduler


def test_thread_scheduler_honours_stop() -> None:
    with ThreadScheduler() as sch:
        gate = threading.Event()
        first = RecordingReceiver()
        first.run(sx.schedule(sch) | sx.then(lambda: gate.wait(5) and None))
        second = RecordingReceiver()
        second.run(sx.schedule(sch))
        second.request_stop()  # requested while the item is still queued
        gate.set()
        first.wait()
        second.wait()
        assert second.stopped and first.value == ()
        assert sch.wait_idle(5) and sch.busy == 0
        assert sx.get_forward_progress_guarantee(sch) is sx.forward_progress_guarantee.concurrent
    with pytest.raises(RuntimeError, match="closed"):
        RecordingReceiver().run(sx.schedule(sch))


def test_terminate_calls_fixture(sx_terminate_calls: TerminateRecorder) -> None:
    src = sx.inplace_stop_source()
    cb = sx.inplace_stop_callback(src.get_token(), lambda: 1 / 0)
    src.request_stop()
    assert sx_terminate_calls.reasons == ["stop callback raised"]
    assert isinstance(sx_terminate_calls.calls[0][1], ZeroDivisionError)
    cb.close()


def test_property_examples_fixture(
    sx_property_examples: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from structexec.testing.strategies import max_examples

    assert sx_property_examples >= 1
    monkeypatch.setenv("STRUCTEXEC_PROPERTY_EXAMPLES", "1234")
    assert max_examples() == 1234
    monkeypatch.setenv("STRUCTEXEC_PROPERTY_EXAMPLES", "")
    assert max_examples(7) == 7
    monkeypatch.setenv("STRUCTEXEC_PROPERTY_EXAMPLES", "0")
    with pytest.raises(ValueError):
        max_examples()


async def test_no_trio_leaks_fixture_clean(sx_no_trio_leaks: LeakReport) -> None:
    async with trio.open_nursery() as n:
        n.start_soon(trio.sleep, 0)
    assert sx_no_trio_leaks.tasks_at_entry >= 1


_PLUGIN_CONFTEST = """
import pytest
from importlib.metadata import entry_points
if not any(ep.value == "structexec.testing.plugin" for ep in entry_points(group="pytest11")):
    pytest_plugins = ["structexec.testing.plugin"]
"""


def test_plugin_fixtures_fail_tests_that_break_the_contract(pytester: pytest.Pytester) -> None:
    """The fixtures turn violations, leaks and terminate calls into test failures."""
    pytester.makeconftest(_PLUGIN_CONFTEST)
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    pytester.makepyfile(
        """
        import trio
        import structexec as sx

        def test_swallowed_violation(sx_recording_receiver):
            sx_recording_receiver.run(sx.just(1))
            try:
                sx_recording_receiver.set_value(2)   # a second completion
            except AssertionError:
                pass                               # swallowed by "library" code

        async def test_leaked_task(sx_no_trio_leaks):
            trio.lowlevel.spawn_system_task(trio.sleep_forever)

        async def test_terminate_in_trio(sx_no_trio_leaks):
            from structexec._core._errors import terminate
            terminate("boom", None)

        async def test_unjoined_scope(sx_no_trio_leaks, sx_manual_scheduler):
            scope = sx.counting_scope()
            sx.spawn(sx.schedule(sx_manual_scheduler), scope.get_token())
            sx_manual_scheduler.drain()   # the work is done, but the scope is never joined

        def test_clean(sx_recording_receiver, sx_manual_scheduler, sx_terminate_calls):
            sx_recording_receiver.run(sx.schedule(sx_manual_scheduler))
            sx_manual_scheduler.drain()
            assert sx_recording_receiver.value == ()
        """
    )
    result = pytester.runpytest_subprocess("-p", "trio", "-q")
    # The swallowed violation: the test body passes, its teardown errors.
    result.assert_outcomes(passed=2, failed=3, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*second completion*",
            "*trio task leak*sleep_forever*",
            "*terminate handler called*boom*",
            "*counting scope leak*not joined*",
        ],
        consecutive=False,
    )


def test_entry_point_and_conftest_do_not_double_register(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the ``pytest11`` entry point installed, the project's conftest must not load the
    plugin a second time (pytest would refuse a module registered under two names)."""
    import pathlib

    conftest = pathlib.Path(__file__).with_name("conftest.py").read_text()
    pytester.makeconftest(conftest)
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    site = pytester.mkdir("site")
    dist = site / "structexec_fake_ep-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: structexec-fake-ep\nVersion: 0\n")
    (dist / "entry_points.txt").write_text("[pytest11]\nstructexec = structexec.testing.plugin\n")
    pytester.makepyfile(
        """
        def test_fixture(sx_recording_receiver, request):
            pm = request.config.pluginmanager
            names = [n for n, p in pm.list_name_plugin()
                     if getattr(p, "__name__", "") == "structexec.testing.plugin"]
            assert names == ["structexec"], names
        """
    )
    root = pathlib.Path(__file__).resolve().parents[1]
    monkeypatch.setenv("PYTHONPATH", f"{site}:{root}")
    result = pytester.runpytest_subprocess("-p", "trio", "-q")
    result.assert_outcomes(passed=1)


async def test_no_trio_leaks_fixture_accepts_joined_scope(sx_no_trio_leaks: LeakReport) -> None:
    async with sx.counting_scope() as scope:
        scope.spawn(sx.just())
    assert scope.state == "joined"


_OLD_NAMES = [
    "make_receiver",
    "manual_scheduler",
    "no_trio_leaks",
    "property_examples",
    "recording_receiver",
    "terminate_calls",
    "thread_scheduler",
]


def test_plugin_fixture_names_are_prefixed() -> None:
    """Every fixture the plugin adds to a user's session is ``sx_...`` or a deprecated alias
    of one (docs/testing.md "Pytest fixtures")."""
    import structexec.testing.plugin as plugin

    assert sorted(plugin.__all__) == sorted(f"sx_{n}" for n in _OLD_NAMES)
    assert all(name.startswith("sx_") for name in plugin.__all__)


def test_old_fixture_names_are_deprecated_aliases(pytester: pytest.Pytester) -> None:
    """Each unprefixed name used before still gives the same value and warns, naming the new one;
    a suite's own fixture of that name wins over the alias."""
    pytester.makeconftest(_PLUGIN_CONFTEST)
    pytester.makeini("[pytest]\ntrio_mode = true\n")
    body = "\n".join(
        f"def test_{n}({n}, sx_{n}):\n    assert {n} is sx_{n}\n"
        for n in _OLD_NAMES
        if n != "no_trio_leaks"
    )
    pytester.makepyfile(
        test_aliases=body + "\nasync def test_no_trio_leaks(no_trio_leaks, sx_no_trio_leaks):\n"
        "    assert no_trio_leaks is sx_no_trio_leaks\n",
        test_own="""
        import pytest

        @pytest.fixture
        def manual_scheduler():
            return "mine"

        def test_own_fixture_wins(manual_scheduler, sx_manual_scheduler):
            assert manual_scheduler == "mine"
            assert sx_manual_scheduler != "mine"
        """,
    )
    result = pytester.runpytest_subprocess("-p", "trio", "-q", "-W", "error::DeprecationWarning")
    # under -W error each alias fails with its warning (the async one inside the trio test);
    # the own fixture and nothing else passes
    result.assert_outcomes(passed=1, errors=len(_OLD_NAMES) - 1, failed=1)
    for n in _OLD_NAMES:
        result.stdout.fnmatch_lines([f"*fixture '{n}' is deprecated; use 'sx_{n}'*"])
    result = pytester.runpytest_subprocess("-p", "trio", "-q", "-W", "default")
    result.assert_outcomes(passed=len(_OLD_NAMES) + 1, warnings=len(_OLD_NAMES))
