"""The proto is KEDA's, and the committed stubs are what the generator makes of it."""

from scaler import protogen
from scaler._proto import externalscaler_pb2 as pb
from google.protobuf.descriptor import FieldDescriptor as F


def test_committed_stubs_are_fresh():
    assert protogen.main(["--check"]) == 0, "stale stubs: run `python -m scaler.protogen`"


def test_stubs_import_inside_the_package():
    text = (protogen.OUT_DIR / "externalscaler_pb2_grpc.py").read_text()
    assert "\nimport externalscaler_pb2" not in text
    assert "from . import externalscaler_pb2" in text


EXPECTED = {
    "ScaledObjectRef": [("name", 1, F.TYPE_STRING), ("namespace", 2, F.TYPE_STRING), ("scalerMetadata", 3, F.TYPE_MESSAGE)],
    "IsActiveResponse": [("result", 1, F.TYPE_BOOL)],
    "GetMetricSpecResponse": [("metricSpecs", 1, F.TYPE_MESSAGE)],
    "MetricSpec": [("metricName", 1, F.TYPE_STRING), ("targetSize", 2, F.TYPE_INT64), ("targetSizeFloat", 3, F.TYPE_DOUBLE)],
    "GetMetricsRequest": [("scaledObjectRef", 1, F.TYPE_MESSAGE), ("metricName", 2, F.TYPE_STRING)],
    "GetMetricsResponse": [("metricValues", 1, F.TYPE_MESSAGE)],
    "MetricValue": [("metricName", 1, F.TYPE_STRING), ("metricValue", 2, F.TYPE_INT64), ("metricValueFloat", 3, F.TYPE_DOUBLE)],
}


def test_wire_compatible_with_keda():
    assert pb.DESCRIPTOR.package == "externalscaler"
    for msg, fields in EXPECTED.items():
        d = pb.DESCRIPTOR.message_types_by_name[msg]
        got = [(f.name, f.number, f.type) for f in d.fields]
        assert got == fields, msg
    md = pb.DESCRIPTOR.message_types_by_name["ScaledObjectRef"].fields_by_name["scalerMetadata"].message_type
    assert md.GetOptions().map_entry
    svc = pb.DESCRIPTOR.services_by_name["ExternalScaler"]
    methods = {m.name: (m.input_type.name, m.output_type.name, m.server_streaming) for m in svc.methods}
    assert methods == {
        "IsActive": ("ScaledObjectRef", "IsActiveResponse", False),
        "StreamIsActive": ("ScaledObjectRef", "IsActiveResponse", True),
        "GetMetricSpec": ("ScaledObjectRef", "GetMetricSpecResponse", False),
        "GetMetrics": ("GetMetricsRequest", "GetMetricsResponse", False),
        "StreamMetricSpec": ("ScaledObjectRef", "GetMetricSpecResponse", True),
    }
    for msg, name in (("GetMetricsResponse", "metricValues"), ("GetMetricSpecResponse", "metricSpecs")):
        assert pb.DESCRIPTOR.message_types_by_name[msg].fields_by_name[name].is_repeated
