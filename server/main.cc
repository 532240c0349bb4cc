// expertd: serves a Mixture-of-Experts model over gRPC.
//   expertd --model_dir=DIR [--listen=127.0.0.1:50051] [--config=FILE] ...
//
// Signals: SIGTERM, SIGINT and SIGHUP drain (health NOT_SERVING, in-flight
// requests get --shutdown_grace_seconds) and exit 0. A second one of them
// during the drain ends the process at once (exit 3). Every signal is logged.
// SIGHUP drains rather than reloads: a supervisor restarts the daemon with the
// new configuration.
//
//   expertd --config=FILE --check_config   validate the flags and config, then exit
//
// Exit status: 0 after a clean drain (or a valid --check_config), 1 if the
// model cannot be loaded or a port cannot be bound, 2 for bad flags, 3 when a
// second signal cut the drain short.
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "base/flags.h"
#include "base/log.h"
#include "google/protobuf/stubs/logging.h"
#include "server/daemon.h"
#include "server/options.h"
#include "server/port_file.h"
#include "server/version.h"

namespace {

constexpr int kExitForcedBySecondSignal = 3;

// The protobuf runtime's own messages go through our logger, so
// --log_format=json output stays one JSON object per line.
void ProtobufLogToOurLog(google::protobuf::LogLevel level, const char* file, int line,
                         const std::string& message) {
  if (level >= google::protobuf::LOGLEVEL_ERROR) {
    EXPERTD_LOG(Error, "protobuf").With("message", message).With("file", file).With("line", line);
  } else {
    EXPERTD_LOG(Warn, "protobuf").With("message", message).With("file", file).With("line", line);
  }
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
  }
  return "signal";
}

// Drains on a helper thread while main keeps listening for signals, so a
// second signal can end the process even when the drain is stuck.
int DrainWatchingSignals(expertd::server::Daemon* daemon, const sigset_t& stop_signals) {
  std::atomic<bool> drained{false};
  std::thread drain([&] {
    daemon->Shutdown();
    drained.store(true);
  });
  while (!drained.load()) {
    timespec tick{0, 50 * 1000 * 1000};
    const int sig = sigtimedwait(&stop_signals, nullptr, &tick);
    if (sig > 0) {
      EXPERTD_LOG(Warn, "second stop signal: exiting without finishing the drain")
          .With("signal", SignalName(sig))
          .With("exit_status", kExitForcedBySecondSignal);
      std::fflush(nullptr);
      std::_Exit(kExitForcedBySecondSignal);
    }
  }
  drain.join();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using expertd::server::ServerOptions;
  // Block the stop signals in every thread (gRPC's included); main waits for them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  ServerOptions options;
  expertd::FlagSet flags(
      std::string("expertd ") + expertd::server::kVersion +
      ": serves a Mixture-of-Experts model over gRPC.\n"
      "usage: expertd --model_dir=DIR [--listen=HOST:PORT] [--config=FILE.json] [flags]");
  expertd::server::RegisterServerFlags(&flags, &options);
  // Not a ServerOptions field: it changes what the binary does, not how it serves.
  bool check_config = false;
  flags.Bool("check_config", &check_config,
             "validate the flags and --config file (paths included), print 'config ok' and exit "
             "0, or exit 2 naming the bad flag; nothing is loaded or bound");
  absl::Status s = flags.Parse(argc, argv, nullptr);
  if (s.ok() && flags.help_requested()) {
    std::printf("%s", flags.Usage().c_str());
    return 0;
  }
  if (s.ok()) s = expertd::server::ValidateServerOptions(&options);
  if (!s.ok()) {
    std::fprintf(stderr, "expertd: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (check_config) {
    std::printf("expertd: config ok (model_name=%s)\n", options.model_name.c_str());
    return 0;
  }
  expertd::log::Level level;
  expertd::log::Format format;
  expertd::log::ParseLevel(options.log_level, &level);
  expertd::log::ParseFormat(options.log_format, &format);
  expertd::log::SetMinLevel(level);
  expertd::log::SetFormat(format);
  google::protobuf::SetLogHandler(&ProtobufLogToOurLog);

  EXPERTD_LOG(Info, "starting")
      .With("version", expertd::server::kVersion)
      .With("model_dir", options.model_dir)
      .With("backend", options.backend)
      .With("matmul_activations", options.matmul_activations)
      .With("kv_cache_bytes", options.kv_cache_bytes)
      .With("expert_offload", options.experts.expert_offload)
      .With("expert_cache_bytes", options.experts.expert_cache_bytes)
      .With("expert_policy", options.experts.expert_policy)
      .With("prefetch", options.experts.prefetch);

  const std::string port_file = options.port_file;
  expertd::server::Daemon daemon(std::move(options));
  s = daemon.Start();
  if (!s.ok()) {
    EXPERTD_LOG(Error, "cannot start").With("error", s);
    std::fprintf(stderr, "expertd: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  if (!port_file.empty()) {
    // Add a listener's port here when it gains one. admin_port equals
    // grpc_port without --admin_listen.
    expertd::server::ListeningPorts ports;
    ports.ports = {{"grpc_port", daemon.port()},
                   {"admin_port", daemon.admin_port()},
                   {"metrics_port", daemon.metrics_port()},
                   {"http_port", daemon.http_port()}};
    absl::Status written = expertd::server::WritePortFile(port_file, ports);
    if (!written.ok()) {
      EXPERTD_LOG(Error, "cannot write port file").With("path", port_file).With("error", written);
      daemon.Shutdown();
      return 1;
    }
  }

  // Wait for a stop signal, watching for a failed background load meanwhile.
  bool load_reported = false;
  while (true) {
    timespec tick{0, 200 * 1000 * 1000};
    int sig = sigtimedwait(&stop_signals, nullptr, &tick);
    if (sig > 0) {
      EXPERTD_LOG(Info, "stop signal").With("signal", SignalName(sig)).With("action", "drain");
      break;
    }
    if (!load_reported && daemon.load_finished()) {
      load_reported = true;
      absl::Status load = daemon.load_status();
      if (!load.ok()) {
        EXPERTD_LOG(Error, "model load failed").With("error", load);
        std::fprintf(stderr, "expertd: model load failed: %s\n",
                     std::string(load.message()).c_str());
        daemon.Shutdown();
        return 1;
      }
    }
  }
  return DrainWatchingSignals(&daemon, stop_signals);
}
