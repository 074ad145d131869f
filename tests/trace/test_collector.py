"""The garbage collector around long-lived objects: paused, and frozen only in the command's own
process."""

import gc
import subprocess
import sys
import textwrap

from tensortrace.trace import collector


def _in_a_process(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_in_a_library_process_long_lived_only_pauses_and_restores():
    frozen = gc.get_freeze_count()
    assert gc.isenabled()
    with collector.long_lived():
        assert not gc.isenabled()
        made = [[n] for n in range(1000)]
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen  # the user's objects stay in the collector's sight
    assert gc.is_tracked(made[0])
    gc.disable()
    try:
        with collector.long_lived():
            pass
        assert not gc.isenabled()  # a collector the user turned off stays off
    finally:
        gc.enable()


def test_in_the_commands_own_process_what_it_imports_is_frozen():
    out = _in_a_process(
        """
        import gc
        from tensortrace.trace import collector
        collector.own_process()
        before = gc.get_freeze_count()
        with collector.long_lived():
            import tensortrace.render.console
        print(gc.get_freeze_count() > before + 1000, gc.isenabled())
    """
    )
    assert out == "True True"


def test_the_command_freezes_its_modules_and_still_collects_garbage():
    # The entry point imports the command line under long_lived; cycles made
    # after that are still collected.
    out = _in_a_process(
        """
        import gc, sys, weakref
        sys.argv = ["tensortrace", "--version"]
        import tensortrace.__main__ as entry
        try:
            entry.main()
        except SystemExit:
            pass
        class Node:
            pass
        a, b = Node(), Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        print(gc.get_freeze_count() > 1000, gc.isenabled(), gone() is None,
              "tensortrace.cli.main" in sys.modules)
    """
    )
    assert out.splitlines()[-1] == "True True True True"


def test_a_renderer_is_imported_long_lived_once_and_later_calls_freeze_nothing():
    out = _in_a_process(
        """
        import gc
        from tensortrace.trace import collector
        from tensortrace.render import renderer
        collector.own_process()
        before = gc.get_freeze_count()
        renderer("console")
        first = gc.get_freeze_count()
        kept = [[n] for n in range(1000)]  # the caller's objects, made after the import
        renderer("console")
        print(first > before + 1000, gc.get_freeze_count() == first, gc.is_tracked(kept[0]))
    """
    )
    assert out == "True True True"
