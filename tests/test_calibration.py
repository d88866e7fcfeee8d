"""One-time kernel calibration kept per CPU model (backends/software/calibration.py) and the
Winograd/direct choice it measures (backends/software/ops/conv_costs.py)."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import numpy as np
import pytest

from rknnlite import InvalidParamError, ModelInvalidError
from rknnlite.backends.software import calibration
from rknnlite.backends.software.ops import KERNELS, conv as conv_mod, conv_costs
from rknnlite.backends.software.ops.conv_costs import PROBES, WinogradCosts, fit

KEY = {"choice": "test/1", "cpu": "Test CPU", "caches": "L1d 32K, L2 1024K (sysfs)", "isa": 2}


class Counter:
    def __init__(self, value=None):
        self.calls = 0
        self.value = value or {"x": 1.5}

    def __call__(self):
        self.calls += 1
        return dict(self.value, n=self.calls)


@pytest.fixture
def env(tmp_path):
    return {"RKNNLITE_CACHE_DIR": str(tmp_path / "cache"), "RKNNLITE_CALIBRATION": "auto"}


@pytest.mark.parametrize("value, mode", [(None, "auto"), ("", "auto"), (" AUTO ", "auto"), ("off", "off"),
                                         ("refresh", "refresh")])
def test_modes(value, mode):
    assert calibration.mode({} if value is None else {"RKNNLITE_CALIBRATION": value}) == mode


def test_an_unknown_mode_is_refused_by_name():
    with pytest.raises(InvalidParamError) as info:
        calibration.mode({"RKNNLITE_CALIBRATION": "sometimes"})
    assert "RKNNLITE_CALIBRATION='sometimes'" in str(info.value) and "auto, off, refresh" in str(info.value)


def test_cache_directory_precedence(tmp_path):
    assert calibration.cache_dir({"RKNNLITE_CACHE_DIR": str(tmp_path), "XDG_CACHE_HOME": "/x"}) == tmp_path
    assert calibration.cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "rknnlite"
    assert calibration.cache_dir({}).parts[-2:] == (".cache", "rknnlite")


def test_measured_once_then_read(env):
    measure = Counter()
    first = calibration.calibrated("thing", KEY, measure, env)
    again = calibration.calibrated("thing", KEY, measure, env)
    assert first == again == {"x": 1.5, "n": 1} and measure.calls == 1
    (stored,) = (calibration.cache_dir(env)).glob("thing-*.json")
    content = json.loads(stored.read_text())
    assert content["key"] == dict(KEY, rknnlite=calibration.__version__) and content["value"] == first


def test_another_key_or_release_measures_again(env, monkeypatch):
    measure = Counter()
    calibration.calibrated("thing", KEY, measure, env)
    calibration.calibrated("thing", dict(KEY, cpu="Other CPU"), measure, env)
    assert measure.calls == 2
    monkeypatch.setattr(calibration, "__version__", "99.0")
    calibration.calibrated("thing", KEY, measure, env)
    assert measure.calls == 3
    assert len(list(calibration.cache_dir(env).glob("thing-*.json"))) == 3


def test_refresh_measures_and_overwrites(env):
    measure = Counter()
    calibration.calibrated("thing", KEY, measure, env)
    assert calibration.calibrated("thing", KEY, measure, dict(env, RKNNLITE_CALIBRATION="refresh"))["n"] == 2
    assert calibration.calibrated("thing", KEY, measure, env)["n"] == 2 and measure.calls == 2


def test_off_neither_measures_nor_reads(env):
    measure = Counter()
    calibration.calibrated("thing", KEY, measure, env)
    assert calibration.calibrated("thing", KEY, measure, dict(env, RKNNLITE_CALIBRATION="off")) is None
    assert measure.calls == 1


@pytest.mark.parametrize("damage", ["{not json", json.dumps([1, 2]), json.dumps({"key": {"cpu": "x"}, "value": {}}),
                                    json.dumps({"key": None, "value": 3})])
def test_a_damaged_or_foreign_file_is_measured_again(env, damage):
    measure = Counter()
    calibration.calibrated("thing", KEY, measure, env)
    (stored,) = calibration.cache_dir(env).glob("thing-*.json")
    stored.write_text(damage)
    assert calibration.calibrated("thing", KEY, measure, env)["n"] == 2
    assert json.loads(stored.read_text())["value"]["n"] == 2  # and stored again


def test_a_value_its_reader_refuses_is_measured_again(env):
    measure = Counter()
    accept = lambda value: value["n"] != 1  # noqa: E731
    assert calibration.calibrated("thing", KEY, measure, env, accept=accept)["n"] == 1  # measured: not vetted
    assert calibration.calibrated("thing", KEY, measure, env, accept=accept)["n"] == 2  # n=1 refused
    assert calibration.calibrated("thing", KEY, measure, env, accept=accept)["n"] == 2 and measure.calls == 2


def test_an_unwritable_directory_keeps_the_measurement_to_the_process(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    env = {"RKNNLITE_CACHE_DIR": str(blocker / "cache")}
    measure = Counter()
    assert calibration.calibrated("thing", KEY, measure, env) == {"x": 1.5, "n": 1}
    assert calibration.calibrated("thing", KEY, measure, env)["n"] == 2  # nothing was stored
    assert blocker.read_text() == "not a directory"


# -- the Winograd/direct cost model ------------------------------------------------------------

TRUE = WinogradCosts(direct_mac=1.2e-11, winograd_mac=1.4e-11, transform_in=2e-8, transform_out=3e-8,
                     f2_mac=0.9e-11, f2_in=2e-8, f2_out=2e-8)
#: the same CPU priced as before F(2x2) had costs of its own
F4_ONLY = replace(TRUE, f2_mac=0.0, f2_in=0.0, f2_out=0.0)
FIELDS = ("direct_mac", "winograd_mac", "transform_in", "transform_out", "f2_mac", "f2_in", "f2_out")


def _probes_from(costs: WinogradCosts, noise=None):
    rng = np.random.default_rng(1)
    out = []
    for C, M, n in PROBES:
        tile = 4 if (-(-n // 4)) ** 2 >= conv_mod._WINO_MIN_TILES else 2   # what "always" runs
        w, t_in, t_out = costs.tile_costs(tile)
        wino = (-(-n // tile)) ** 2 * (tile + 2) ** 2 * (w * M * C + (t_in * C + t_out * M) / 36)
        direct = costs.direct_mac * 9 * M * C * n * n
        if noise:
            wino, direct = wino * (1 + noise * rng.standard_normal()), direct * (1 + noise * rng.standard_normal())
        out.append({"C": C, "M": M, "size": n, "tile": tile, "winograd_s": wino, "direct_s": direct})
    return out


def test_fit_recovers_the_costs_behind_the_timings():
    got = fit(_probes_from(TRUE))
    for name in FIELDS:
        assert getattr(got, name) == pytest.approx(getattr(TRUE, name), rel=1e-6), name


def test_probes_run_both_tile_sizes():
    assert {p["tile"] for p in _probes_from(TRUE)} == {2, 4}
    assert sum(p["tile"] == 2 for p in _probes_from(TRUE)) >= 3   # one per fitted F(2x2) cost


def test_f2_costs_of_their_own_decide_small_outputs():
    # 7x7 outputs have too few 4x4 tiles: F(2x2), whose GEMMs cost per multiply-add what F(4x4)'s do not
    assert [TRUE.winograd_pays(C, M, (7, 7), 2) for C, M in ((128, 192), (160, 224), (16, 64))] == [True, True, False]
    assert not F4_ONLY.winograd_pays(128, 192, (7, 7), 2) and not F4_ONLY.winograd_pays(160, 224, (7, 7), 2)
    assert TRUE.winograd_pays(64, 64, (56, 56), 4) == F4_ONLY.winograd_pays(64, 64, (56, 56), 4)


def test_a_measurement_without_f2_probes_prices_f2_as_f4():
    got = fit([p for p in _probes_from(TRUE) if p["tile"] == 4])
    assert (got.f2_mac, got.f2_in, got.f2_out) == (0.0, 0.0, 0.0)
    assert got.tile_costs(2) == got.tile_costs(4) == pytest.approx((TRUE.winograd_mac, TRUE.transform_in,
                                                                   TRUE.transform_out), rel=1e-6)
    # probes stored before F(2x2) was measured have no "tile": F(4x4)
    old = [{k: v for k, v in p.items() if k != "tile"} for p in _probes_from(TRUE) if p["tile"] == 4]
    assert fit(old) == got


def test_fit_with_noisy_timings_keeps_the_decisions():
    got = fit(_probes_from(TRUE, noise=0.05))
    for C, M, n in [(16, 64, 56), (64, 64, 56), (256, 256, 14), (16, 256, 14)]:
        assert got.winograd_pays(C, M, (n, n), 4) == TRUE.winograd_pays(C, M, (n, n), 4)


def test_few_channels_go_direct_many_go_winograd():
    assert not TRUE.winograd_pays(16, 64, (56, 56), 4)
    assert TRUE.winograd_pays(64, 64, (56, 56), 4) and TRUE.winograd_pays(512, 512, (7, 7), 2)


@pytest.mark.parametrize("value", [{}, {"direct_mac": "x", "winograd_mac": 1, "transform_in": 0, "transform_out": 0},
                                   {"direct_mac": 0, "winograd_mac": 1e-11, "transform_in": 0, "transform_out": 0},
                                   {"direct_mac": 1e-11, "winograd_mac": 1e-11, "transform_in": -1,
                                    "transform_out": 0},
                                   {"direct_mac": float("nan"), "winograd_mac": 1e-11, "transform_in": 0,
                                    "transform_out": 0},
                                   {"direct_mac": 1e-11, "winograd_mac": 1e-11, "transform_in": 0,
                                    "transform_out": 0, "f2_mac": "x"},
                                   {"direct_mac": 1e-11, "winograd_mac": 1e-11, "transform_in": 0,
                                    "transform_out": 0, "f2_mac": 1e-11, "f2_in": -1, "f2_out": 0}])
def test_malformed_costs_are_none(value):
    assert WinogradCosts.from_value(value) is None


def test_a_stored_file_without_costs_or_probes_is_measured_again(tmp_path, monkeypatch):
    monkeypatch.setenv("RKNNLITE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("RKNNLITE_CALIBRATION", "auto")
    monkeypatch.setattr(conv_costs, "measure_probes", lambda: _probes_from(TRUE))
    key = conv_costs.calibration_key(2)
    path = calibration.stored_path(conv_costs.CHOICE, key)
    path.write_text(json.dumps({"key": dict(key, rknnlite=calibration.__version__), "value": {"junk": 1}}))
    got = conv_costs._load(2)
    assert got.direct_mac == pytest.approx(TRUE.direct_mac, rel=1e-6)
    assert len(json.loads(path.read_text())["value"]["probes"]) == len(PROBES)  # stored again
    # a stored measurement whose fit failed (probes, no costs) is kept: no usable costs, no re-measuring
    monkeypatch.setattr(conv_costs, "measure_probes", lambda: pytest.fail("measured again"))
    path.write_text(json.dumps({"key": dict(key, rknnlite=calibration.__version__), "value": {"probes": []}}))
    assert conv_costs._load(2) is None


def test_fit_of_nothing_usable_is_none():
    assert fit([]) is None
    zeros = [dict(p, direct_s=0.0) for p in _probes_from(TRUE)]
    assert fit(zeros) is None


# -- the choice inside the Conv kernel ---------------------------------------------------------

needs_winograd = pytest.mark.skipif(conv_mod._ISA == 0, reason="Winograd needs the AVX2/AVX-512 micro-kernels")


def _conv(C, M, n, how=True):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, C, n, n)).astype(np.float32)
    w = (rng.standard_normal((M, C, 3, 3)) * 0.1).astype(np.float32)
    b = rng.standard_normal(M).astype(np.float32)
    spec = KERNELS["Conv"]
    prepared = spec.prepare({"pads": [1, 1, 1, 1], "_opset": 17, "_winograd": how}, [None, w, b])
    y = spec.fn([x, w, b], prepared)[0]
    return conv_mod._geometry(prepared["_conv"], x.shape, w.shape).path, y


@needs_winograd
def test_measured_costs_decide_each_layer(monkeypatch):
    monkeypatch.setattr(conv_costs, "_costs", TRUE)
    few, y_few = _conv(16, 64, 28)
    many, _ = _conv(64, 64, 28)
    assert (few, many) == ("gather", "winograd")
    forced, y_forced = _conv(16, 64, 28, "always")
    assert forced == "winograd"
    np.testing.assert_allclose(y_few, y_forced, rtol=1e-4, atol=1e-4)
    assert _conv(64, 64, 28, False)[0] == "gather"
    # a 7x7 output (F(2x2)) by F(2x2)'s own costs
    assert _conv(128, 192, 7)[0] == "winograd"
    monkeypatch.setattr(conv_costs, "_costs", F4_ONLY)
    assert _conv(128, 192, 7)[0] == "gather"


@needs_winograd
def test_without_a_measurement_every_eligible_layer_is_winograd(monkeypatch):
    monkeypatch.setattr(conv_costs, "_costs", None)
    assert _conv(16, 64, 28)[0] == "winograd"


def test_a_bad_winograd_attribute_is_refused():
    w = np.zeros((4, 4, 3, 3), np.float32)
    with pytest.raises(ModelInvalidError) as info:
        KERNELS["Conv"].prepare({"pads": [1, 1, 1, 1], "_opset": 17, "_winograd": "sometimes"}, [None, w, None])
    assert "_winograd" in str(info.value) and "'always'" in str(info.value)


PROBE = """
import json, sys
import numpy as np
import rknnlite
if sys.argv[2] == "stored-only":
    from rknnlite.backends.software.ops import conv_costs

    def refuse(*a, **k):
        raise AssertionError("measured again")
    conv_costs.measure_probes = refuse
x = np.random.default_rng(1).standard_normal((1, 16, 32, 32)).astype(np.float32)
try:
    with rknnlite.Context(sys.argv[1]) as ctx:
        ctx.run([x], data_format="nchw")
except rknnlite.InvalidParamError as e:
    print(json.dumps({"error": str(e)}))
else:
    from rknnlite.backends.software.ops import conv, conv_costs
    costs = conv_costs.current_costs(conv._ISA)
    print(json.dumps({"costs": None if costs is None else list(vars(costs).values())}))
"""


def _run(json_probe, model_path, env, how="measure"):
    return json_probe(PROBE, model_path, how, env=dict(os.environ, **env), timeout=180)


@pytest.fixture(scope="module")
def model_path(conv_relu_model, tmp_path_factory):
    path = tmp_path_factory.mktemp("calibration") / "conv.rknn"
    path.write_bytes(conv_relu_model(channels=16, size=32))
    return path


@needs_winograd
def test_a_process_measures_once_per_machine_and_later_ones_read_it(model_path, tmp_path, json_probe):
    env = {"RKNNLITE_CALIBRATION": "auto", "RKNNLITE_CACHE_DIR": str(tmp_path)}
    first = _run(json_probe, model_path, env)
    (stored,) = tmp_path.glob("conv-winograd-*.json")
    content = json.loads(stored.read_text())
    assert content["key"]["choice"] == "conv-winograd/2" and content["key"]["isa"] == conv_mod._ISA
    assert [(p["C"], p["M"], p["size"]) for p in content["value"]["probes"]] == list(PROBES)
    assert all(p["winograd_s"] > 0 and p["direct_s"] > 0 for p in content["value"]["probes"])
    # each probe records the Winograd variant that ran: F(2x2) on the 7x7 outputs, F(4x4) elsewhere
    assert [p["tile"] for p in content["value"]["probes"]] == [2 if n == 7 else 4 for _, _, n in PROBES]
    second = _run(json_probe, model_path, env, "stored-only")
    assert first["costs"] == second["costs"] and stored.read_text() == json.dumps(content, indent=1, sort_keys=True)


def test_a_bad_mode_fails_the_first_context_by_name(model_path, tmp_path, json_probe):
    result = _run(json_probe, model_path, {"RKNNLITE_CALIBRATION": "maybe", "RKNNLITE_CACHE_DIR": str(tmp_path)})
    assert "RKNNLITE_CALIBRATION='maybe'" in result["error"]
    assert not list(tmp_path.iterdir())
