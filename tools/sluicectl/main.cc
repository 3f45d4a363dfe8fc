// sluicectl: the command-line tool. main() only dispatches: it parses the command line
// (command_line.h) and runs the chosen subcommand, each in its own file (commands.h).
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/util/malloc_retention.h"
#include "core/util/mutex_deadlock_detection.h"
#include "tools/sluicectl/command_line.h"
#include "tools/sluicectl/commands.h"

int main(int argc, char** argv) {
  using namespace sluice;  // NOLINT: main only
  // run, bench and save build and free batches continuously: keep freed memory for the next
  // ones instead of faulting it in again (core/util/malloc_retention.h).
  RetainFreedMemory();
  SkipMutexDeadlockDetection();  // core/util/mutex_deadlock_detection.h says why
  const SluicectlCommand* command = nullptr;
  std::vector<std::string> args;
  bool help_requested = false;
  int rc = ParseCommandLine(argc, argv, &command, &args, &help_requested);
  if (rc != kExitOk) return rc;
  if (command == nullptr) return HelpMain(args);  // `sluicectl`, `sluicectl help [cmd]`
  if (help_requested) {
    PrintCommandHelp(*command, std::cout);
    return kExitOk;
  }
  if (absl::Status s = PrepareCommand(*command, argc, argv); !s.ok()) return ReportError(s);
  rc = command->run(args);
  std::cout.flush();
  return rc;
}
