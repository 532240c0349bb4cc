#!/usr/bin/env python3
"""Interoperability test: a gRPC client that is not ours in C++.

Debian's python3-grpcio (grpc's Python stack, its own HTTP/2 framing on the
shared C core) with python3-protobuf's pure-runtime API talks to the real
expertd binary. Nothing is generated: the API is loaded at run time from the
FileDescriptorSet that protoc makes from proto/ (//proto:expertd_descriptor_set),
and one test loads it from the server's reflection service alone, the way
grpcurl does. Checks Health, reflection, GetModelInfo, GetServerInfo and
Generate streaming, and parses /metrics with the reference Python Prometheus
client's parser (python3-prometheus-client).

Writes JUnit XML to $XML_OUTPUT_FILE so tools/count_tests.py counts each case.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request
from xml.sax.saxutils import quoteattr, escape

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from prometheus_client.parser import text_string_to_metric_families

MODEL_DIR = "tests/data/fixtures/qwen2_moe_mixed"


def runfile(path):
    srcdir, workspace = os.environ.get("TEST_SRCDIR"), os.environ.get("TEST_WORKSPACE")
    return os.path.join(srcdir, workspace, path) if srcdir and workspace else path


def message_class(pool, full_name):
    descriptor = pool.FindMessageTypeByName(full_name)
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


class Api:
    """The services of a descriptor pool, callable over a grpc.Channel."""

    def __init__(self, files):
        self.pool = descriptor_pool.DescriptorPool()
        for f in files:
            self.pool.Add(f)
        self.files = {f.name: f for f in files}

    @classmethod
    def from_descriptor_set(cls, path):
        with open(path, "rb") as f:
            return cls(descriptor_pb2.FileDescriptorSet.FromString(f.read()).file)

    def msg(self, full_name, **fields):
        return message_class(self.pool, full_name)(**fields)

    def _method(self, channel, service, method, kind):
        m = self.pool.FindServiceByName(service).methods_by_name[method]
        response = message_class(self.pool, m.output_type.full_name)
        factory = getattr(channel, kind)
        return factory("/%s/%s" % (service, method),
                       request_serializer=lambda r: r.SerializeToString(),
                       response_deserializer=response.FromString)

    def unary(self, channel, service, method, request, timeout=10):
        return self._method(channel, service, method, "unary_unary")(request, timeout=timeout)

    def server_stream(self, channel, service, method, request, timeout=30):
        return self._method(channel, service, method, "unary_stream")(request, timeout=timeout)

    def bidi(self, channel, service, method, requests, timeout=10):
        return self._method(channel, service, method, "stream_stream")(iter(requests), timeout=timeout)


class Daemon:
    """The real server/expertd on free localhost ports."""

    def __init__(self, workdir):
        self.port_file = os.path.join(workdir, "expertd.port")
        self.log_path = os.path.join(workdir, "expertd.log")
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [runfile("server/expertd"), "--model_dir=" + MODEL_DIR, "--listen=127.0.0.1:0",
             "--port_file=" + self.port_file, "--metrics_listen=127.0.0.1:0", "--shutdown_grace_seconds=1"],
            stdout=self.log, stderr=subprocess.STDOUT)
        ports = json.loads(self._wait(lambda: open(self.port_file).read().strip() or None))
        self.port = ports["grpc_port"]
        self.metrics_port_from_file = ports["metrics_port"]
        self.metrics_port = self._wait(self._metrics_port_from_log)

    def _wait(self, probe, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("expertd exited with %d:\n%s" % (self.proc.returncode, self.output()))
            try:
                value = probe()
                if value:
                    return value
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        raise RuntimeError("timed out waiting for expertd:\n" + self.output())

    def _metrics_port_from_log(self):
        for line in self.output().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("msg") == "metrics listening":
                return entry["port"]
        return None

    def output(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=20)
        self.log.close()
        return code


class PythonClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.workdir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.api = Api.from_descriptor_set(runfile("proto/expertd_descriptor_set.binpb"))
        cls.daemon = Daemon(cls.workdir)
        cls.channel = grpc.insecure_channel("127.0.0.1:%d" % cls.daemon.port)
        deadline = time.monotonic() + 30
        while cls.health("") != "SERVING":
            if time.monotonic() > deadline:
                raise RuntimeError("never SERVING:\n" + cls.daemon.output())
            time.sleep(0.05)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        code = cls.daemon.stop()
        if code != 0:
            raise RuntimeError("expertd exited with %d after SIGTERM:\n%s" % (code, cls.daemon.output()))

    @classmethod
    def health(cls, service):
        request = cls.api.msg("grpc.health.v1.HealthCheckRequest", service=service)
        response = cls.api.unary(cls.channel, "grpc.health.v1.Health", "Check", request)
        return response.DESCRIPTOR.enum_types_by_name["ServingStatus"].values_by_number[response.status].name

    def reflect(self, *requests):
        """Sends reflection requests on one stream; returns the responses."""
        msgs = [self.api.msg("grpc.reflection.v1alpha.ServerReflectionRequest", **r) for r in requests]
        return list(self.api.bidi(self.channel, "grpc.reflection.v1alpha.ServerReflection",
                                  "ServerReflectionInfo", msgs))

    def test_health(self):
        self.assertEqual(self.health(""), "SERVING")
        self.assertEqual(self.health("expertd.v1.InferenceService"), "SERVING")
        self.assertEqual(self.health("expertd.v1.AdminService"), "SERVING")
        with self.assertRaises(grpc.RpcError) as err:
            self.health("no.such.Service")
        self.assertEqual(err.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_reflection_lists_services(self):
        (response,) = self.reflect({"list_services": ""})
        names = {s.name for s in response.list_services_response.service}
        self.assertTrue({"expertd.v1.InferenceService", "expertd.v1.AdminService", "grpc.health.v1.Health",
                         "grpc.reflection.v1alpha.ServerReflection"} <= names, names)

    def test_port_file_names_grpc_admin_and_metrics_ports(self):
        self.assertEqual(self.daemon.metrics_port_from_file, self.daemon.metrics_port)
        with open(self.daemon.port_file) as f:
            ports = json.load(f)
        self.assertEqual(set(ports), {"grpc_port", "admin_port", "metrics_port"})
        # Without --admin_listen, AdminService shares the gRPC port.
        self.assertEqual(ports["admin_port"], ports["grpc_port"])

    def test_reflection_describes_every_listed_service(self):
        """grpcurl describe: every listed service, its file and all dependencies."""
        (listing,) = self.reflect({"list_services": ""})
        names = [s.name for s in listing.list_services_response.service]
        self.assertIn("grpc.health.v1.Health", names)
        for name in names:
            (response,) = self.reflect({"file_containing_symbol": name})
            self.assertEqual(response.WhichOneof("message_response"), "file_descriptor_response",
                             "%s: %s" % (name, response.error_response.error_message))
            files = {}
            pending = [descriptor_pb2.FileDescriptorProto.FromString(b)
                       for b in response.file_descriptor_response.file_descriptor_proto]
            while pending:
                f = pending.pop()
                if f.name in files:
                    continue
                files[f.name] = f
                for dep in f.dependency:
                    if dep in files:
                        continue
                    (dep_response,) = self.reflect({"file_by_filename": dep})
                    self.assertEqual(dep_response.WhichOneof("message_response"), "file_descriptor_response",
                                     "%s needs %s: %s" % (name, dep, dep_response.error_response.error_message))
                    pending.extend(descriptor_pb2.FileDescriptorProto.FromString(b)
                                   for b in dep_response.file_descriptor_response.file_descriptor_proto)
            pool = descriptor_pool.DescriptorPool()
            added = set()

            def add(file_name):
                if file_name in added:
                    return
                added.add(file_name)
                for dep in files[file_name].dependency:
                    add(dep)
                pool.Add(files[file_name])

            for file_name in files:
                add(file_name)
            service = pool.FindServiceByName(name)
            self.assertGreater(len(service.methods), 0, name)

    def test_reflection_describes_the_same_api_as_proto(self):
        (response,) = self.reflect({"file_containing_symbol": "expertd.v1.InferenceService"})
        self.assertEqual(response.WhichOneof("message_response"), "file_descriptor_response")
        served = {}
        for blob in response.file_descriptor_response.file_descriptor_proto:
            f = descriptor_pb2.FileDescriptorProto.FromString(blob)
            served[f.name] = f
        self.assertIn("expertd.proto", served)
        self.assertIn("google/protobuf/duration.proto", served)  # imports come along

        def shape(file_proto):
            services = {s.name: [(m.name, m.input_type, m.output_type, m.client_streaming, m.server_streaming)
                                 for m in s.method] for s in file_proto.service}
            messages = {m.name: [(f.name, f.number, f.type, f.type_name, f.label) for f in m.field]
                        for m in file_proto.message_type}
            return services, messages

        self.assertEqual(shape(served["expertd.proto"]), shape(self.api.files["expertd.proto"]))
        generate = [m for m in served["expertd.proto"].service[0].method if m.name == "Generate"][0]
        self.assertTrue(generate.server_streaming)

        (missing,) = self.reflect({"file_containing_symbol": "expertd.v1.NoSuchThing"})
        self.assertEqual(missing.WhichOneof("message_response"), "error_response")
        self.assertEqual(missing.error_response.error_code, grpc.StatusCode.NOT_FOUND.value[0])

    def test_client_built_from_reflection_alone(self):
        """What grpcurl does: no .proto on the client, only what the server tells."""
        (response,) = self.reflect({"file_containing_symbol": "expertd.v1.InferenceService"})
        files = [descriptor_pb2.FileDescriptorProto.FromString(b)
                 for b in response.file_descriptor_response.file_descriptor_proto]
        by_name = {f.name: f for f in files}
        ordered, seen = [], set()

        def add(name):  # dependencies first
            if name in seen:
                return
            seen.add(name)
            for dep in by_name[name].dependency:
                add(dep)
            ordered.append(by_name[name])

        for f in files:
            add(f.name)
        api = Api(ordered)
        info = api.unary(self.channel, "expertd.v1.InferenceService", "GetModelInfo",
                         api.msg("expertd.v1.GetModelInfoRequest"))
        self.assertEqual(info.model_name, "qwen2_moe_mixed")
        self.assertEqual(info.num_experts, 8)

    def test_get_model_info(self):
        info = self.api.unary(self.channel, "expertd.v1.InferenceService", "GetModelInfo",
                              self.api.msg("expertd.v1.GetModelInfoRequest"))
        self.assertEqual(info.model_name, "qwen2_moe_mixed")
        self.assertEqual(info.architecture, "Qwen2MoeForCausalLM")
        self.assertEqual(info.num_layers, 3)
        self.assertEqual(info.num_experts, 8)
        self.assertEqual(info.experts_per_token, 2)
        self.assertEqual(info.vocab_size, 512)
        self.assertEqual(list(info.eos_token_ids), [2])
        self.assertGreater(info.total_params, info.active_params_per_token)

    def test_get_server_info(self):
        info = self.api.unary(self.channel, "expertd.v1.InferenceService", "GetServerInfo",
                              self.api.msg("expertd.v1.GetServerInfoRequest"))
        self.assertTrue(info.ready)
        self.assertFalse(info.draining)
        self.assertTrue(info.version)
        self.assertGreater(info.uptime.seconds * 10**9 + info.uptime.nanos, 0)

    def test_generate_streaming(self):
        request = self.api.msg("expertd.v1.GenerateRequest", request_id="interop-1")
        request.token_ids.ids.extend([1, 5, 7, 9])
        request.sampling.temperature = 0.0
        request.stopping.max_new_tokens = 4
        stream = self.api.server_stream(self.channel, "expertd.v1.InferenceService", "Generate", request)
        responses = list(stream)
        self.assertGreater(len(responses), 0)
        final = responses[-1]
        unspecified = 0  # FINISH_REASON_UNSPECIFIED
        self.assertTrue(all(r.finish_reason == unspecified for r in responses[:-1]))
        self.assertNotEqual(final.finish_reason, unspecified)
        self.assertTrue(all(r.request_id == "interop-1" for r in responses))
        tokens = [t for r in responses for t in r.token_ids]
        self.assertGreaterEqual(len(tokens), 1)
        self.assertLessEqual(len(tokens), 4)
        self.assertEqual(final.usage.prompt_tokens, 4)
        self.assertEqual(final.usage.completion_tokens, len(tokens))
        self.assertEqual(final.usage.total_tokens, 4 + len(tokens))
        "".join(r.text for r in responses).encode("utf-8")  # every delta is valid text

    def test_unknown_method_is_unimplemented(self):
        call = self.channel.unary_unary("/expertd.v1.InferenceService/NoSuchMethod",
                                        request_serializer=lambda r: r, response_deserializer=lambda b: b)
        with self.assertRaises(grpc.RpcError) as err:
            call(b"", timeout=10)
        self.assertEqual(err.exception.code(), grpc.StatusCode.UNIMPLEMENTED)

    def test_metrics_parse_with_the_reference_parser(self):
        url = "http://127.0.0.1:%d" % self.daemon.metrics_port
        with urllib.request.urlopen(url + "/health", timeout=10) as r:
            self.assertEqual((r.status, r.read()), (200, b"SERVING\n"))
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            self.assertEqual(r.headers["Content-Type"], "text/plain; version=0.0.4; charset=utf-8")
            text = r.read().decode("utf-8")
        families = {f.name: f for f in text_string_to_metric_families(text)}
        # The parser turns a sample that does not belong to the family declared
        # above it into an "untyped" family of its own: there must be none.
        self.assertEqual([f.name for f in families.values() if f.type == "untyped"], [])
        self.assertEqual([f.name for f in families.values() if not f.documentation], [])
        for f in families.values():
            if f.type != "histogram":
                continue
            counts = [s.value for s in f.samples if s.name.endswith("_bucket")]
            (total,) = [s.value for s in f.samples if s.name.endswith("_count")]
            self.assertEqual(counts, sorted(counts), f.name)
            self.assertEqual(counts[-1], total, f.name)
        samples = {s.name for f in families.values() for s in f.samples}
        for name in ("expertd:num_requests_running", "expertd:num_requests_waiting", "expertd:kv_cache_usage_perc",
                     "expertd:prompt_tokens_total", "expertd:generation_tokens_total",
                     "expertd:request_success_total", "expertd:time_to_first_token_seconds_bucket",
                     "expertd:inter_token_latency_seconds_count", "expertd:e2e_request_latency_seconds_sum",
                     "expertd:request_queue_time_seconds_bucket", "expertd:request_prompt_tokens_bucket",
                     "expertd:request_generation_tokens_bucket"):
            self.assertIn(name, samples)
        # This daemon keeps every expert resident: the paged-bytes counter is
        # declared, and its {path, format} series appear only once a model pages
        # experts (offload_daemon_test checks them).
        moved = families["expertd:expert_bytes_moved"]
        self.assertEqual(moved.type, "counter")
        self.assertEqual(moved.samples, [])
        ttft = families["expertd:time_to_first_token_seconds"]
        self.assertEqual(ttft.type, "histogram")
        buckets = [s for s in ttft.samples if s.name.endswith("_bucket")]
        self.assertEqual(buckets[-1].labels["le"], "+Inf")
        self.assertEqual(buckets[0].labels, {"model_name": "qwen2_moe_mixed", "le": "0.001"})
        reasons = {s.labels["finished_reason"] for s in families["expertd:request_success"].samples
                   if s.name == "expertd:request_success_total"}
        self.assertEqual(reasons, {"stop", "length", "abort", "error"})


class JUnitResult(unittest.TextTestResult):
    """Also remembers each case's outcome for the JUnit XML file."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cases = []
        self._start = 0.0

    def startTest(self, test):
        self._start = time.monotonic()
        super().startTest(test)

    def _record(self, test, kind, detail=""):
        self.cases.append((test, kind, detail, time.monotonic() - self._start))

    def addSuccess(self, test):
        super().addSuccess(test)
        self._record(test, "ok")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._record(test, "failure", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        super().addError(test, err)
        self._record(test, "error", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._record(test, "skipped", reason)


def write_junit(path, result):
    out = ['<?xml version="1.0" encoding="UTF-8"?>', "<testsuites>",
           '<testsuite name="PythonClientTest" tests="%d">' % len(result.cases)]
    for test, kind, detail, seconds in result.cases:
        name = getattr(test, "_testMethodName", str(test))
        out.append('<testcase classname="PythonClientTest" name=%s time="%.3f">' % (quoteattr(name), seconds))
        if kind != "ok":
            out.append("<%s message=%s>%s</%s>" % (kind, quoteattr(detail.splitlines()[-1] if detail else kind),
                                                   escape(detail), kind))
        out.append("</testcase>")
    out += ["</testsuite>", "</testsuites>"]
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(PythonClientTest)
    result = unittest.TextTestRunner(resultclass=JUnitResult, verbosity=2).run(suite)
    if os.environ.get("XML_OUTPUT_FILE"):
        write_junit(os.environ["XML_OUTPUT_FILE"], result)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
