"""CloudWatch metrics answered locally, from the samples the jobs' metric definitions took from their
hosts' lines (emulator/run/metrics.py; docs/metrics.md).

The service publishes a training job's metrics in the namespace `/aws/sagemaker/TrainingJobs` with
the dimension `TrainingJobName`, which is what the SageMaker SDK's `TrainingJobAnalytics` asks
GetMetricStatistics for (sagemaker/analytics.py `_fetch_metric`: Average over `Period` seconds).
Here each metric is listed once for the job, and once per host with the dimension `Host`
(`<job>/algo-N`), as the service lists a job's instance metrics. A job is found by name in the local
record (emulator.state.job_records), whichever way it was started.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from emulator.aws.stub import ApiError, Operation, Service
from emulator.run import metrics
from emulator.state import job_records

JOB_DIMENSION = "TrainingJobName"
HOST_DIMENSION = "Host"


class CloudWatch(Service):
    name = "cloudwatch"

    def operations(self) -> Mapping[str, Operation]:
        return {"ListMetrics": self.list_metrics, "GetMetricStatistics": self.get_metric_statistics,
                "GetMetricData": self.get_metric_data}

    def list_metrics(self, params: dict[str, Any]) -> dict[str, Any]:
        namespace = params.get("Namespace")
        if namespace not in (None, metrics.NAMESPACE):
            return {"Metrics": []}
        wanted = {d["Name"]: d.get("Value") for d in params.get("Dimensions") or []}
        found = []
        for record in job_records.all_jobs():
            samples = metrics.read(record.job_dir)
            names = sorted({s.name for s in samples})
            for name in names:
                if params.get("MetricName") not in (None, name):
                    continue
                hosts = sorted({s.host for s in samples if s.name == name}, key=lambda h: int(h.split("-")[1]))
                for dimension in [{JOB_DIMENSION: record.job_name},
                                  *({HOST_DIMENSION: f"{record.job_name}/{h}"} for h in hosts)]:
                    if all(dimension.get(k, object()) == v or (v is None and k in dimension)
                           for k, v in wanted.items()):
                        found.append({"Namespace": metrics.NAMESPACE, "MetricName": name,
                                      "Dimensions": [{"Name": k, "Value": v} for k, v in dimension.items()]})
        return {"Metrics": found}

    def get_metric_statistics(self, params: dict[str, Any]) -> dict[str, Any]:
        statistics = list(params.get("Statistics") or [])
        if not statistics:
            raise ApiError("InvalidParameterCombination", "Must specify either Statistics or ExtendedStatistics, "
                           "but not both.")
        samples = self._samples(params.get("Namespace"), str(params.get("MetricName")), params.get("Dimensions"))
        points = metrics.datapoints(samples, _start(params["StartTime"]), _epoch(params["EndTime"]),
                                    int(params["Period"]), statistics)
        return {"Label": params.get("MetricName"), "Datapoints": points}

    def get_metric_data(self, params: dict[str, Any]) -> dict[str, Any]:
        start, end = _start(params["StartTime"]), _epoch(params["EndTime"])
        results = []
        for query in params.get("MetricDataQueries") or []:
            stat = query.get("MetricStat")
            if stat is None:
                raise ApiError("ValidationError", "only MetricStat queries are emulated (not Expression)")
            metric = stat["Metric"]
            samples = self._samples(metric.get("Namespace"), str(metric.get("MetricName")), metric.get("Dimensions"))
            name = stat["Stat"]
            points = metrics.datapoints(samples, start, end, int(stat["Period"]), [name])
            newest_first = params.get("ScanBy", "TimestampDescending") == "TimestampDescending"
            points = sorted(points, key=lambda p: p["Timestamp"], reverse=newest_first)
            results.append({"Id": query["Id"], "Label": query.get("Label") or metric.get("MetricName"),
                            "Timestamps": [p["Timestamp"] for p in points],
                            "Values": [p[name] for p in points if name in p], "StatusCode": "Complete"})
        return {"MetricDataResults": results, "Messages": []}

    def _samples(self, namespace: Any, name: str, dimensions: Sequence[Mapping[str, str]] | None) \
            -> list[metrics.Sample]:
        """The samples of metric `name` of the job or host the dimensions name; none for anything else
        (CloudWatch answers an unknown metric with no datapoints, not an error)."""
        given = {d["Name"]: d["Value"] for d in dimensions or []}
        if namespace != metrics.NAMESPACE or len(given) != 1:
            return []
        if JOB_DIMENSION in given:
            job, host = given[JOB_DIMENSION], None
        elif HOST_DIMENSION in given:
            job, _, host = given[HOST_DIMENSION].rpartition("/")
        else:
            return []
        record = job_records.find(job)
        if record is None:
            return []
        return [s for s in metrics.read(record.job_dir) if s.name == name and host in (None, s.host)]


def _start(value: Any) -> float:
    """A query's StartTime as CloudWatch takes it for recent data: rounded down to the whole minute
    (GetMetricStatistics: "12:32:34 is rounded down to 12:32:00"). So the SDK's query from a job's
    TrainingStartTime gets the values its hosts printed in that first minute."""
    return _epoch(value) // 60 * 60


def _epoch(value: Any) -> float:
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()
    if isinstance(value, int | float):
        return float(value)
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
