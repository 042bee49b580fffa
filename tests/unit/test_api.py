"""The public surface of the sulis package: names, result codes, actions and
the exception hierarchy. Pure: no driver."""

from __future__ import annotations

import sulis


def test_every_public_name_exists():
    for name in sulis.__all__:
        assert hasattr(sulis, name), name
    assert sulis.build_profile in ("release", "debug")
    assert isinstance(sulis.__version__, str) and sulis.__version__.count(".") == 2


def test_result_codes_are_aerons():
    assert [sulis.NOT_CONNECTED, sulis.BACK_PRESSURED, sulis.ADMIN_ACTION, sulis.CLOSED,
            sulis.MAX_POSITION_EXCEEDED] == [-1, -2, -3, -4, -5]


def test_result_names():
    assert sulis.result_name(sulis.NOT_CONNECTED) == "NOT_CONNECTED"
    assert sulis.result_name(sulis.BACK_PRESSURED) == "BACK_PRESSURED"
    assert sulis.result_name(sulis.ADMIN_ACTION) == "ADMIN_ACTION"
    assert sulis.result_name(sulis.CLOSED) == "CLOSED"
    assert sulis.result_name(sulis.MAX_POSITION_EXCEEDED) == "MAX_POSITION_EXCEEDED"
    assert sulis.result_name(0) == "position 0"
    assert sulis.result_name(128) == "position 128"
    assert sulis.result_name(-99) == "position -99"


def test_actions_follow_aerons_order():
    assert [(a.name, int(a)) for a in sulis.Action] == [("ABORT", 1), ("BREAK", 2), ("COMMIT", 3), ("CONTINUE", 4)]


def test_exception_hierarchy():
    for name in ("ConfigurationError", "DriverTimeoutError", "ClientTimeoutError", "RegistrationError",
                 "ClosedError", "ActiveDriverError", "MessageTooLongError"):
        cls = getattr(sulis, name)
        assert issubclass(cls, sulis.SulisError), name
        assert getattr(sulis.errors, name) is cls
    assert issubclass(sulis.MessageTooLongError, sulis.ConfigurationError)
    assert issubclass(sulis.SulisError, Exception)
    assert not issubclass(sulis.DriverTimeoutError, TimeoutError)


def test_media_driver_and_client_are_native_subclasses():
    assert issubclass(sulis.MediaDriver, sulis._native.MediaDriver)
    assert issubclass(sulis.Client, sulis._native.Client)


def test_offer_results_are_an_int_enum_equal_to_aerons_codes():
    import enum

    assert issubclass(sulis.OfferResult, enum.IntEnum)
    codes = {"NOT_CONNECTED": -1, "BACK_PRESSURED": -2, "ADMIN_ACTION": -3, "CLOSED": -4, "MAX_POSITION_EXCEEDED": -5}
    assert {m.name: int(m) for m in sulis.OfferResult} == codes
    for name, code in codes.items():
        member = getattr(sulis, name)
        assert member is sulis.OfferResult[name] and member == code and member < 0
        assert sulis.result_name(code) == name
    assert repr(sulis.BACK_PRESSURED) == "<OfferResult.BACK_PRESSURED: -2>"
    assert sulis.result_name(4096) == "position 4096" and sulis.result_name(-99) == "position -99"


def test_media_driver_docstring_names_every_threading_mode_and_do_work():
    doc = sulis.MediaDriver.__doc__ or ""
    for mode in ("dedicated", "shared-network", "shared", "invoker"):
        assert f"``{mode}``" in doc, mode
    assert "driver.do_work()" in doc
    native = sulis._native.MediaDriver.__doc__ or ""
    assert 'threading_mode="invoker"' in native and "do_work()" in native


def test_constants_come_from_rust_with_aerons_values():
    """Recording signals and states, the replay lengths and the CnC file name are defined once, in Rust
    (sulis-protocol), and reach Python through _native with Aeron's values."""
    from sulis import _native
    from sulis.archive import REPLAY_ALL_AND_FOLLOW, REPLAY_ALL_AND_STOP, RecordingSignal, RecordingState

    assert RecordingSignal is _native.RecordingSignal and RecordingState is _native.RecordingState
    assert [(s.name, int(s)) for s in RecordingSignal] == [
        ("START", 0), ("STOP", 1), ("EXTEND", 2), ("REPLICATE", 3), ("MERGE", 4), ("SYNC", 5), ("DELETE", 6),
        ("REPLICATE_END", 7)]
    assert [(s.name, int(s)) for s in RecordingState] == [("INVALID", 0), ("VALID", 1), ("DELETED", 2)]
    assert (REPLAY_ALL_AND_FOLLOW, REPLAY_ALL_AND_STOP) == (-1, -2)
    assert sulis.CNC_FILE == "cnc.dat"
    assert RecordingSignal.START.__doc__ == "A recording started."
