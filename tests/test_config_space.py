"""ConfigSpace: cross product, conditions, platform filtering, fields across Triton releases."""

from __future__ import annotations

import logging
import re

import pytest
import triton

from triton_dejavu_like import ConfigSpace
from triton_dejavu_like._compat import CONFIG_FIELDS
from triton_dejavu_like.tuner.config_space import platform_check_for


def test_cross_product_size_order_and_fields():
    space = ConfigSpace({"BLOCK_M": [32, 64], "BLOCK_N": [16, 32, 64]}, num_warps=[4, 8], num_stages=[2])
    assert space.raw_size == 12
    configs = space.configs()
    assert len(space) == 12 == len(configs)
    assert configs[0].kwargs == {"BLOCK_M": 32, "BLOCK_N": 16}
    assert (configs[0].num_warps, configs[0].num_stages) == (4, 2)
    assert configs[-1].kwargs == {"BLOCK_M": 64, "BLOCK_N": 64} and configs[-1].num_warps == 8
    assert all(isinstance(c, triton.Config) for c in configs)


def test_conditions_filter_points():
    space = ConfigSpace(
        {"BLOCK_M": [16, 32, 64], "BLOCK_K": [16, 32, 64]},
        num_warps=[2, 4, 8],
        kwarg_conditions=[lambda kw: kw["BLOCK_K"] <= kw["BLOCK_M"]],
        conditions=[lambda c: c.num_warps * 8 <= c.kwargs["BLOCK_M"]],
    )
    configs = space.configs()
    assert all(c.kwargs["BLOCK_K"] <= c.kwargs["BLOCK_M"] for c in configs)
    assert all(c.num_warps * 8 <= c.kwargs["BLOCK_M"] for c in configs)
    expected = sum(1 for m in (16, 32, 64) for k in (16, 32, 64) for w in (2, 4, 8) if k <= m and w * 8 <= m)
    assert len(space) == expected == len(configs)
    assert space.raw_size == 27


def test_size_is_counted_without_listing():
    space = ConfigSpace(
        {"A": list(range(50)), "B": list(range(40))}, kwarg_conditions=[lambda kw: kw["A"] > kw["B"]]
    )
    assert len(space) == sum(1 for a in range(50) for b in range(40) if a > b)
    assert not space._listed, "counting keeps no list"


def test_points_encode_and_decode():
    space = ConfigSpace(
        {"BLOCK": [16, 32, 64]}, num_warps=[4, 8], kwarg_conditions=[lambda kw: kw["BLOCK"] != 32]
    )
    for config in space.configs():
        point = space.config_to_point(config)
        assert space.decode(point).all_kwargs() == config.all_kwargs()
    assert space.decode((1, 0)) is None, "BLOCK=32 is excluded by the condition"
    assert space.config_to_point(triton.Config({"BLOCK": 128})) is None


def test_pre_hook_is_attached_to_every_config():
    def hook(nargs):
        return None

    space = ConfigSpace({"BLOCK": [16, 32]}, pre_hook=hook)
    assert all(c.pre_hook is hook for c in space.configs())


def test_fields_of_other_triton_releases_are_dropped_with_a_warning(caplog):
    other = next(
        f
        for f in ("num_buffers_warp_spec", "enable_warp_specialization", "ir_override")
        if f not in CONFIG_FIELDS
    )
    with caplog.at_level(logging.WARNING, logger="triton_dejavu_like"):
        space = ConfigSpace({"BLOCK": [16]}, num_warps=[4], **{other: [0, 1]})
    assert other in caplog.text
    assert space.dropped_options == [other]
    assert len(space) == 1


def test_unknown_field_is_an_error():
    with pytest.raises(TypeError, match="num_warpz"):
        ConfigSpace({"BLOCK": [16]}, num_warpz=[4])


@pytest.mark.parametrize("bad", [{"BLOCK": []}, {"BLOCK": 16}, {"BLOCK": "16"}])
def test_bad_lists_are_errors(bad):
    with pytest.raises((TypeError, ValueError)):
        ConfigSpace(bad)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"num_warps": [4, 0]}, "num_warps lists 0, which is not a power of 2"),
        ({"num_warps": [3]}, "num_warps lists 3"),
        ({"num_warps": ["8"]}, "num_warps lists '8'"),
        ({"num_warps": [True]}, "num_warps lists True"),
        ({"num_stages": [2, -1]}, "num_stages lists -1, which is not a whole number >= 0"),
        ({"num_ctas": [1.0]}, "num_ctas lists 1.0"),
        ({"maxnreg": [None, 0]}, "maxnreg lists 0"),
    ],
)
def test_a_launch_option_no_compile_takes_is_refused_when_the_space_is_made(options, said):
    """A typo in a launch option's list (num_warps=[0], ["8"]) made every point with it fail to
    compile during tuning, each ruled out one by one: it is an error naming the value at once."""
    with pytest.raises(ValueError, match=re.escape(said)):
        ConfigSpace({"BLOCK": [16]}, **options)
    accepted = ConfigSpace({"BLOCK": [16]}, num_warps=[1, 8], num_stages=[0, 3], maxnreg=[None, 128])
    assert accepted.raw_size == 8


def test_platform_filter():
    space = ConfigSpace({"BLOCK": [16]}, num_ctas=[1, 2], maxnreg=[None, 128])
    ampere = space.configs(platform_check_for("cuda", (8, 0)))
    assert {(c.num_ctas, c.maxnreg) for c in ampere} == {(1, None), (1, 128)}
    assert len(space.configs(platform_check_for("cuda", (9, 0)))) == 4
    assert {(c.num_ctas, c.maxnreg) for c in space.configs(platform_check_for("hip", None))} == {(1, None)}
    assert len(space.configs(platform_check_for("interpreter", None))) == 4
    assert len(space.configs()) == 4, "listing for a platform leaves the space as it was"


def test_a_space_whose_conditions_keep_nothing_is_a_clear_error():
    with pytest.raises(ValueError, match="config space is empty after its conditions"):
        ConfigSpace({"BLOCK": [16, 32]}, kwarg_conditions=[lambda kw: kw["BLOCK"] > 64])


@pytest.mark.parametrize(
    ("values", "said"),
    [([1, 1.0], "as 1 and 1.0"), ([0, False], "as 0 and False"), ([16, 32, 16], "16 twice")],
)
def test_a_list_with_equal_values_is_refused(values, said):
    """triton.Config compares configs with 0 and False (or a value listed twice) equal: both were
    timed, one timing kept, and the slower config could be stored with the faster one's time."""
    with pytest.raises(ValueError, match=said):
        ConfigSpace({"B": values})


def test_config_to_point_finds_values_of_several_types():
    space = ConfigSpace({"B": [1, "1", None]})
    configs = space.configs()
    assert [space.config_to_point(c) for c in configs] == [(i,) for i in range(3)]
    assert space.config_to_point(triton.Config({})) is None  # no B at all: not the None in the list


# --- launch options among the kwargs, kwarg conditions --------------------------------------------------


@pytest.mark.parametrize("field", ["num_warps", "num_stages", "num_ctas", "maxnreg"])
def test_a_launch_option_among_the_kwargs_names_its_own_argument(field):
    """triton.Config launches such a kwarg as the field's default: the list would have no effect."""
    with pytest.raises(ValueError, match=rf"{field}=\[\.\.\.\]"):
        ConfigSpace({"BLOCK": [16], field: [4, 8]})


def test_kwarg_conditions_are_asked_once_per_combination_of_the_kwargs():
    """As triton-dejavu asks them (a kwarg condition does not see the Config fields), and the points
    they keep are those of a condition asked per point, in cross-product order."""
    asked = []

    def condition(kwargs):
        asked.append(dict(kwargs))
        return kwargs["BLOCK"] != 32

    space = ConfigSpace({"BLOCK": [16, 32, 64]}, num_warps=[1, 2, 4, 8], kwarg_conditions=[condition])
    asked.clear()  # the constructor asked until it found a point
    configs = space.configs()
    assert asked == [{"BLOCK": 16}, {"BLOCK": 32}, {"BLOCK": 64}]
    assert [(c.kwargs["BLOCK"], c.num_warps) for c in configs] == [
        (b, w) for b in (16, 64) for w in (1, 2, 4, 8)
    ]


# --- mistakes a user makes, and what they are told ----------------------------------------------


def test_a_space_given_where_key_or_configs_go_says_config_space():
    from kernels import add_kernel

    import triton_dejavu_like as tdl

    space = ConfigSpace({"BLOCK": [16, 32]})
    for call in (lambda: tdl.autotune(space, ["n"]), lambda: tdl.autotune(configs=space, key=["n"])):
        with pytest.raises(TypeError, match="pass it as config_space="):
            call()
    with pytest.raises(TypeError, match=r"configs\[1\] is a dict, not a triton.Config"):
        tdl.autotune(configs=[triton.Config({"BLOCK": 16}), {"BLOCK": 32}], key=["n"])(add_kernel)


@pytest.mark.parametrize(
    ("name", "hint"),
    [("search_max_evals", "use search_max_share"), ("kwarg_conditions", r"use ConfigSpace\(")],
)
def test_another_tuners_argument_names_ours(name, hint):
    import triton_dejavu_like as tdl

    with pytest.raises(TypeError, match=hint):
        tdl.autotune(configs=[triton.Config({"BLOCK": 16})], key=["n"], **{name: 10})


def test_a_kwarg_condition_reading_a_config_field_says_where_it_belongs():
    with pytest.raises(ValueError, match=r"use conditions=\[lambda config: config.num_warps"):
        ConfigSpace({"BLOCK": [16, 32]}, kwarg_conditions=[lambda kw: kw["num_warps"] * kw["BLOCK"] <= 128])
    with pytest.raises(KeyError, match="BLOKC"):  # any other missing name is the user's own KeyError
        ConfigSpace({"BLOCK": [16, 32]}, kwarg_conditions=[lambda kw: kw["BLOKC"] <= 16])


def test_an_empty_space_names_a_condition_that_returned_none():
    def small(kw):
        kw["BLOCK"] <= 16  # noqa: B015 (the return forgotten)

    with pytest.raises(ValueError, match=r"small returned None: a missing return\?"):
        ConfigSpace({"BLOCK": [16, 32]}, kwarg_conditions=[small])
    with pytest.raises(ValueError, match=r"none kept\): check kwarg_conditions and conditions$"):
        ConfigSpace({"BLOCK": [16, 32]}, kwarg_conditions=[lambda kw: kw["BLOCK"] > 32])


def test_a_space_cannot_be_changed_after_it_is_made():
    """Appending a condition or replacing a list changed the listing, not the size counted before."""
    space = ConfigSpace({"BLOCK": [16, 32]}, kwarg_conditions=[lambda kw: True], num_warps=[4, 8])
    assert len(space) == 4
    with pytest.raises(TypeError):
        space.kwargs_with_lists["BLOCK"] = (16, 32, 64)
    with pytest.raises(AttributeError):
        space.kwarg_conditions.append(lambda kw: kw["BLOCK"] == 16)
    assert len(space.configs()) == len(space) == 4


def test_a_numpy_array_of_values_is_a_list_of_python_values():
    np = pytest.importorskip("numpy")
    space = ConfigSpace({"BLOCK": np.array([16, 32])})
    assert [type(c.kwargs["BLOCK"]) for c in space.configs()] == [int, int]


@pytest.mark.parametrize("value", [[16, 32], {"a": 1}, bytearray(b"x")])
def test_a_value_that_cannot_be_hashed_is_refused_when_the_space_is_made(value):
    """triton.Config hashes its values (the tuner keys its timings by config): a list among the
    values made a space, then its first launch failed deep inside tuning with ``unhashable type``."""
    with pytest.raises(TypeError, match=r"BLOCK lists .* cannot be hashed.*a tuple"):
        ConfigSpace({"BLOCK": [value, (1, 2)]})
    with pytest.raises(TypeError, match=r"num_warps lists .* cannot be hashed"):
        ConfigSpace({"BLOCK": [16]}, num_warps=[4, value])


def test_numpy_arrays_among_the_values_are_refused_saying_why():
    """Arrays as values failed on comparing them (``truth value of an array ... is ambiguous``), and a
    2-D array made rows of lists; both are values a config cannot hold."""
    np = pytest.importorskip("numpy")
    with pytest.raises(TypeError, match="cannot be hashed"):
        ConfigSpace({"BLOCK": [np.array([1, 2]), np.array([3, 4])]})
    with pytest.raises(TypeError, match="cannot be hashed"):
        ConfigSpace({"BLOCK": np.array([[16, 32], [64, 128]])})


def test_a_config_list_holding_a_value_that_cannot_be_hashed_names_the_config():
    from kernels import add_kernel

    import triton_dejavu_like as tdl

    configs = [triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": [32]})]
    with pytest.raises(TypeError, match=r"configs\[1\] .*cannot be hashed"):
        tdl.autotune(configs=configs, key=["n"])(add_kernel)


def test_a_single_config_holding_a_list_is_still_launched_untimed():
    """One config is launched without timing (nothing hashes it): it keeps working as it did."""
    from kernels import add_kernel

    import triton_dejavu_like as tdl

    assert len(ConfigSpace({"BLOCK": [[16, 32]]})) == 1
    tdl.autotune(configs=[triton.Config({"BLOCK": [16]})], key=["n"])(add_kernel)  # no TypeError


def test_a_space_is_true_without_counting_its_points():
    """``config_space or default`` asked ``len()``, which walks every point and condition (seconds
    for a million points); a space is never empty (an empty one is refused when made)."""
    asked = []

    def condition(kwargs):
        asked.append(kwargs)
        return True

    space = ConfigSpace({"A": list(range(100)), "B": list(range(100))}, kwarg_conditions=[condition])
    asked.clear()
    assert space and not asked and space._size is None
