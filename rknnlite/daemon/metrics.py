"""Prometheus metrics of the daemon, in a private ``CollectorRegistry``.

The library never registers anything in ``prometheus_client``'s global default registry:
each :class:`DaemonMetrics` owns its registry and ``/metrics`` renders only that.

Series (``model`` is a served model's name, or ``_unknown``):

* ``rknnlite_requests_total{model,endpoint,status}``: requests answered, by HTTP status.
* ``rknnlite_request_duration_seconds{model,endpoint}``: request latency histogram.
* ``rknnlite_inference_duration_seconds{model}``: time in the runner (queue + run).
* ``rknnlite_batch_size{model}``: rows per run of dynamically batched models.
* ``rknnlite_queue_depth{model}``: requests admitted and not yet answered (read from the
  model's concurrency limit at scrape time).
* ``rknnlite_errors_total{model,kind}``: failed inferences (``client``, ``busy``, ``runtime``).
* ``rknnlite_model_ready{model}``: 1 when the model serves, 0 when unavailable.
* ``rknnlite_process_resident_memory_bytes``, ``rknnlite_process_cpu_seconds_total``:
  this process (psutil); ``rknnlite_npu_load_percent{core}`` when the driver exposes it.
"""

from __future__ import annotations

from typing import Tuple

__all__ = ["DaemonMetrics"]

_LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)


class _ProcessCollector:
    """RSS, CPU time and NPU load (under ``sysroot``), read at scrape time."""

    def __init__(self, sysroot: str):
        import psutil

        self._process = psutil.Process()
        self._sysroot = sysroot

    def collect(self):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        from ..platform import read_npu_load

        rss = GaugeMetricFamily("rknnlite_process_resident_memory_bytes", "Resident memory of the daemon (bytes).")
        rss.add_metric([], float(self._process.memory_info().rss))
        yield rss
        times = self._process.cpu_times()
        cpu = CounterMetricFamily("rknnlite_process_cpu_seconds", "CPU time of the daemon (user + system, seconds).")
        cpu.add_metric([], float(times.user + times.system))
        yield cpu
        cores = read_npu_load(self._sysroot).get("cores")
        if cores:
            load = GaugeMetricFamily("rknnlite_npu_load_percent", "NPU load per core (percent, from the driver).",
                                     labels=["core"])
            for core, percent in cores.items():
                load.add_metric([str(core)], float(percent))
            yield load


class DaemonMetrics:
    """The daemon's metrics (see the module doc); ``render()`` gives the /metrics body.

    ``sysroot``: the filesystem root the NPU load is read under (``"/"``; a fake board tree
    in tests), see :func:`rknnlite.platform.read_npu_load`.
    """

    def __init__(self, sysroot: str = "/"):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("rknnlite_requests", "Requests answered.", ["model", "endpoint", "status"], registry=r)
        self.request_seconds = Histogram("rknnlite_request_duration_seconds", "Request latency (seconds).",
                                         ["model", "endpoint"], buckets=_LATENCY_BUCKETS, registry=r)
        self.inference_seconds = Histogram("rknnlite_inference_duration_seconds",
                                           "Time in the runner, queueing included (seconds).", ["model"],
                                           buckets=_LATENCY_BUCKETS, registry=r)
        self.batch_size = Histogram("rknnlite_batch_size", "Rows per run of dynamically batched models.", ["model"],
                                    buckets=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64), registry=r)
        self.queue_depth = Gauge("rknnlite_queue_depth", "Requests admitted and not yet answered.", ["model"],
                                 registry=r)
        self.errors = Counter("rknnlite_errors", "Failed inferences by kind.", ["model", "kind"], registry=r)
        self.model_ready = Gauge("rknnlite_model_ready", "1 when the model serves, 0 when unavailable.", ["model"],
                                 registry=r)
        r.register(_ProcessCollector(sysroot))
        self._children: dict = {}
        self._request_children: dict = {}

    def labels(self, metric, *values):
        """``metric.labels(*values)``, cached: the per-request paths skip prometheus_client's
        label lookup (values are strings, the model name first)."""
        key = (id(metric),) + values
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def observe_request(self, model: str, endpoint: str, status: int, seconds: float) -> None:
        """Count one answered request (``rknnlite_requests_total``) and its latency in seconds
        (``rknnlite_request_duration_seconds``); the two series are looked up once per
        label set."""
        key = (model, endpoint, status)
        pair = self._request_children.get(key)
        if pair is None:
            pair = self._request_children[key] = (self.requests.labels(model, endpoint, str(status)),
                                                   self.request_seconds.labels(model, endpoint))
        pair[0].inc()
        pair[1].observe(seconds)

    def forget_model(self, name: str) -> None:
        """Drop the per-model gauges of an unloaded model (counters keep their history)."""
        for gauge in (self.model_ready, self.queue_depth):
            try:
                gauge.remove(name)
            except KeyError:
                pass
            self._children.pop((id(gauge), name), None)

    def render(self) -> Tuple[bytes, str]:
        """``(body, content_type)`` of the Prometheus text exposition."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST
