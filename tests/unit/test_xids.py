"""NVIDIA's Xid catalog as rollcall classes it, and ``--xid-class`` moving an Xid between the classes."""

from __future__ import annotations

import pytest

from rollcall.evidence.xids import CATALOG, CATALOG_URL, PROGRAM_XIDS, XidClass, XidPolicy, parse_xid_classes
from rollcall.gate import criteria_of
from rollcall.options import OptionError, resolve

pytest_plugins = ["pytester"]


@pytest.mark.parametrize(
    ("xid", "klass", "name"),
    [
        (48, XidClass.HARDWARE, "Double Bit ECC Error"),
        (64, XidClass.HARDWARE, "GPU memory remapping failure"),
        (74, XidClass.HARDWARE, "NVLINK Error"),
        (79, XidClass.HARDWARE, "GPU has fallen off the bus"),
        (92, XidClass.HARDWARE, "High single-bit ECC error rate"),
        (94, XidClass.HARDWARE, "Contained memory error"),
        (95, XidClass.HARDWARE, "Uncontained memory error"),
        (119, XidClass.HARDWARE, "GSP RPC Timeout"),
        (120, XidClass.HARDWARE, "GSP Error"),
        (31, XidClass.PROGRAM, "GPU memory page fault"),
        (13, XidClass.PROGRAM, "Graphics Engine Exception"),
        (63, XidClass.SYSTEM, "GPU memory remapping event"),
        (8, XidClass.SYSTEM, "GPU stopped processing"),
    ],
)
def test_each_class_of_the_catalog(xid, klass, name):
    judged = XidPolicy().of(xid)
    assert (judged.number, judged.klass, judged.name) == (xid, klass, name)


def test_the_program_class_is_the_set_the_device_plugin_leaves_to_the_program_and_nvlinks_page_fault():
    assert sorted(PROGRAM_XIDS) == [13, 31, 43, 45, 68, 109, 137]
    assert CATALOG_URL.startswith("https://docs.nvidia.com/deploy/xid-errors/")


def test_the_catalog_holds_every_class_but_unknown_and_each_xid_once():
    assert {x.klass for x in CATALOG.values()} == {XidClass.HARDWARE, XidClass.PROGRAM, XidClass.SYSTEM}
    assert all(n == x.number and x.name for n, x in CATALOG.items())
    assert len(CATALOG) > 140


def test_an_xid_not_in_the_catalog_is_unknown():
    judged = XidPolicy().of(999)
    assert judged.klass is XidClass.UNKNOWN and judged.name == "not in NVIDIA's Xid catalog"


def test_the_option_moves_an_xid_and_leaves_the_others():
    options = resolve({"xid_class": ["31=hardware", "79=system,999=program"]}, environ={})
    assert options.judging.xid_class == {31: XidClass.HARDWARE, 79: XidClass.SYSTEM, 999: XidClass.PROGRAM}
    policy = criteria_of(options).xids
    assert policy.of(31).klass is XidClass.HARDWARE and policy.of(31).name == "GPU memory page fault"
    assert policy.of(79).klass is XidClass.SYSTEM and policy.of(999).klass is XidClass.PROGRAM
    assert policy.of(13).klass is XidClass.PROGRAM and policy.of(48).klass is XidClass.HARDWARE
    assert resolve({}, environ={"ROLLCALL_XID_CLASS": "13=system"}).judging.xid_class == {13: XidClass.SYSTEM}


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("31", r"'31' is not XID=CLASS"),
        ("x=hardware", r"'x=hardware' is not XID=CLASS"),
        ("0=hardware", r"'0=hardware' is not XID=CLASS"),
        ("31=broken", r"'31=broken': unknown class 'broken'; the classes are hardware, program, system"),
        ("31=unknown", r"unknown class 'unknown'"),
    ],
)
def test_bad_values_are_refused_naming_the_input(value, says):
    with pytest.raises(OptionError, match=r"--xid-class.*" + says):
        resolve({"xid_class": [value]}, environ={})
    with pytest.raises(ValueError, match=says):
        parse_xid_classes([value])


def test_a_bad_value_ends_the_session_with_exit_4_naming_the_option_and_the_input(pytester):
    pytester.makepyfile(test_roll="def test_roll_call(rollcall):\n    raise AssertionError('ran')\n")
    res = pytester.runpytest("-p", "no:cacheprovider", "--xid-class", "31=broken")
    err = res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str() + err
    assert "--xid-class" in err and "'31=broken': unknown class 'broken'" in err and "Traceback" not in err
