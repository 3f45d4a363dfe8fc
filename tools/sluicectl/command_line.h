// sluicectl's command line (command_line.cc): what main() calls to dispatch a subcommand.
// Not thread-safe: called once, from main().
#ifndef SLUICE_TOOLS_SLUICECTL_COMMAND_LINE_H_
#define SLUICE_TOOLS_SLUICECTL_COMMAND_LINE_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tools/sluicectl/commands.h"

namespace sluice {

// Parses argv[1..] in the style of absl flags (--name=value, --name value, --bool, --nobool,
// one or two dashes, "--" ends the flags): the first positional argument is the command (null
// for `sluicectl` and `sluicectl help ...`), the others go to it. Every flag must be one the
// command accepts. Sets the flags through absl's registry. Returns kExitOk, or the exit code of
// a usage error it has reported.
int ParseCommandLine(int argc, char** argv, const SluicectlCommand** command,
                     std::vector<std::string>* positional, bool* help_requested);

// `sluicectl help [COMMAND]`: the usage, or one command's help. Returns the exit code.
int HelpMain(const std::vector<std::string>& args);
void PrintCommandHelp(const SluicectlCommand& c, std::ostream& out);

// Before running `command`: loads the --plugin libraries and fills --coordinator,
// --consumer_index and --num_consumers from the cluster spec where the command takes them and
// the command line does not give them. The plugin loader's or the cluster spec's error.
absl::Status PrepareCommand(const SluicectlCommand& command, int argc, char** argv);

}  // namespace sluice

#endif  // SLUICE_TOOLS_SLUICECTL_COMMAND_LINE_H_
