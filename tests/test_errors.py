"""The error model: code table, class per code, builtin bases, check()."""

from __future__ import annotations

import pickle

import pytest

import rknnlite
from rknnlite import errors as E

EXPECTED = {
    -2: (E.RKNNTimeoutError, TimeoutError, "RKNN_ERR_TIMEOUT"),
    -3: (E.DeviceUnavailableError, OSError, "RKNN_ERR_DEVICE_UNAVAILABLE"),
    -4: (E.RKNNMemoryError, MemoryError, "RKNN_ERR_MALLOC_FAIL"),
    -5: (E.InvalidParamError, ValueError, "RKNN_ERR_PARAM_INVALID"),
    -6: (E.ModelInvalidError, ValueError, "RKNN_ERR_MODEL_INVALID"),
    -7: (E.ContextInvalidError, RuntimeError, "RKNN_ERR_CTX_INVALID"),
    -8: (E.InputInvalidError, ValueError, "RKNN_ERR_INPUT_INVALID"),
    -9: (E.OutputInvalidError, RuntimeError, "RKNN_ERR_OUTPUT_INVALID"),
    -10: (E.DeviceMismatchError, OSError, "RKNN_ERR_DEVICE_UNMATCH"),
    -11: (E.IncompatiblePrecompiledModelError, Exception, "RKNN_ERR_INCOMPATILE_PRE_COMPILE_MODEL"),
    -12: (E.IncompatibleOptimizationLevelError, Exception, "RKNN_ERR_INCOMPATILE_OPTIMIZATION_LEVEL_VERSION"),
    -13: (E.TargetPlatformMismatchError, ValueError, "RKNN_ERR_TARGET_PLATFORM_UNMATCH"),
}


@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_code_maps_to_class_builtin_and_name(code):
    cls, builtin, name = EXPECTED[code]
    assert E.error_class(code) is cls
    assert cls.code == code
    assert E.error_name(code) == name
    with pytest.raises(cls) as info:
        E.check(code, "rknn_run")
    err = info.value
    assert isinstance(err, E.RKNNError) and isinstance(err, builtin)
    assert err.code == code and err.op == "rknn_run"
    assert name in str(err) and str(err).startswith("rknn_run: ")


def test_full_name_table():
    assert E.ERROR_NAMES[0] == "RKNN_SUCC"
    assert E.ERROR_NAMES[-1] == "RKNN_ERR_FAIL"
    assert E.ERROR_NAMES[-14] == "RKNN_WARNING_SKIP_CUSTOM_OP_COMPUTE"
    assert set(E.ERROR_NAMES) == set(range(-14, 1))


def test_check_passes_success_through():
    assert E.check(0, "rknn_init") == 0
    assert E.check(3, "rknn_query") == 3


def test_unknown_code_is_generic_error_with_code():
    with pytest.raises(E.RKNNError) as info:
        E.check(-99, "rknn_run", "something odd")
    assert type(info.value) is E.RKNNError
    assert info.value.code == -99
    assert "something odd" in str(info.value) and "-99" in str(info.value)


def test_encryption_errors():
    assert issubclass(E.DecryptError, E.ModelInvalidError) and issubclass(E.DecryptError, ValueError)
    assert issubclass(E.KeyInvalidError, E.RKNNError) and issubclass(E.KeyInvalidError, ValueError)
    assert not issubclass(E.KeyInvalidError, E.ModelInvalidError)


def test_errors_pickle_with_fields():
    err = E.InputInvalidError("bad shape", op="rknn_inputs_set")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is E.InputInvalidError
    assert (back.code, back.op, back.message) == (-8, "rknn_inputs_set", "bad shape")


def test_reexported_from_package():
    for name in E.__all__:
        if name[0].isupper() and name.endswith("Error"):
            assert getattr(rknnlite, name) is getattr(E, name)
