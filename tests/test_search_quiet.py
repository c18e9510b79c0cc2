"""The guard around third-party imports and calls (``search/_global_state.py``): it keeps the warnings
of the thread it guards quiet, and leaves every other thread's warnings and filters to the user."""

from __future__ import annotations

import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from triton_dejavu_like import DejavuTuningWarning
from triton_dejavu_like.search._global_state import import_in_background, quiet_third_party


@contextmanager
def quiet_block_in_a_thread(body: Callable[[], None] = lambda: None) -> Iterator[None]:
    """A ``quiet_third_party`` block in another thread, running ``body`` and open for the ``with``."""
    inside, leave = threading.Event(), threading.Event()

    def run() -> None:
        with quiet_third_party():
            body()
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert inside.wait(10)
        yield
    finally:
        leave.set()
        thread.join(10)


def theirs() -> None:
    warnings.warn("theirs", DeprecationWarning, stacklevel=1)
    warnings.filterwarnings("ignore", message="a filter of theirs")


def test_another_threads_warnings_reach_the_users_catch_warnings_while_a_block_runs():
    """The block recorded every warning of every thread and only logged them: a request thread's
    warnings raised while SMAC was imported in the background were lost."""
    with pytest.warns(UserWarning) as shown, quiet_block_in_a_thread(theirs):
        warnings.warn("user's", UserWarning, stacklevel=1)
    assert [str(w.message) for w in shown] == ["user's"]


def test_the_users_filters_apply_to_their_warnings_while_a_block_runs_and_stay_after_it():
    """An error filter of the user's was replaced by "always" inside the block, and one the user added
    while the block ran was dropped when it ended."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        with quiet_block_in_a_thread(theirs):
            with pytest.raises(UserWarning, match="user's"):
                warnings.warn("user's", UserWarning, stacklevel=1)
            warnings.simplefilter("error", RuntimeWarning)  # added while the block runs
        with pytest.raises(RuntimeWarning, match="later"):
            warnings.warn("later", RuntimeWarning, stacklevel=1)
        assert not [f for f in warnings.filters if f[1] is not None and f[1].match("a filter of theirs")]


def test_the_guarded_threads_warnings_and_filters_stay_quiet_even_under_an_error_filter(tmp_path):
    """What the import raises (here under the user's "error" filter) does not reach the user, and the
    filter it adds is taken out when it ends; the user's thread warns meanwhile as usual."""
    (tmp_path / "noisy_third_party.py").write_text(
        "import warnings, time\n"
        "warnings.filterwarnings('ignore', message='a filter of theirs')\n"
        "warnings.warn('theirs', DeprecationWarning)\n"
        "time.sleep(0.5)\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        with warnings.catch_warnings(record=True) as shown:
            warnings.simplefilter("error", DeprecationWarning)
            warnings.simplefilter("always", UserWarning)
            filters = list(warnings.filters)
            module = import_in_background("noisy_third_party")
            while "noisy_third_party" not in sys.modules:  # until the import runs
                time.sleep(0.01)
            warnings.warn("user's", UserWarning, stacklevel=1)
            assert module.result(10).__name__ == "noisy_third_party"
            assert list(warnings.filters) == filters
        assert [str(w.message) for w in shown] == ["user's"]
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("noisy_third_party", None)


def test_a_warning_of_this_package_inside_the_block_goes_through_the_users_filters():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DejavuTuningWarning)
        with pytest.raises(DejavuTuningWarning), quiet_third_party():
            warnings.warn("ours", DejavuTuningWarning, stacklevel=1)


def test_filters_the_guarded_code_copies_in_a_catch_warnings_of_its_own_leave_the_users_alone():
    """scikit-learn's parallel helper empties the filters and adds each again inside its own
    ``catch_warnings``: those copies are not the filters the block must take out on exit."""

    def copy_the_filters() -> None:
        copies = list(warnings.filters)
        with warnings.catch_warnings():
            warnings.resetwarnings()
            for action, _, category, _, lineno in copies:  # as plain filters
                warnings.simplefilter(action, category, lineno, append=True)

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        filters = list(warnings.filters)
        with quiet_block_in_a_thread(copy_the_filters):
            pass
        assert list(warnings.filters) == filters
        with pytest.raises(RuntimeWarning):
            warnings.warn("still an error", RuntimeWarning, stacklevel=1)
