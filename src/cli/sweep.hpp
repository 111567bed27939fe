#pragma once
// How the combinations of a sweep ended. A combination that cannot run (a tp that does not split
// the model's heads, a model without the module asked for) or does not fit gets its row with the
// reason, and the rest of the sweep runs; the exit code is the worst that happened
// (docs/cli.md, "Exit codes").

#include <optional>
#include <string>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/units.hpp>
#include <kvcalc/report/record.hpp>

namespace kvcalc::cli {

/// What became of one combination.
enum class Outcome {
  ok,           ///< priced, and it fits
  does_not_fit, ///< priced, but the deployment cannot hold it (its row says why)
  cannot_run,   ///< not priced: the combination is not a deployment (its row says n/a and why)
};

/// The outcomes of a sweep's combinations, gathered as they run. A combination either was
/// priced (add(Outcome): its row holds figures, whether or not it fits) or was stopped by an
/// error (add(Error): its row holds only why); the command fails when none was priced.
class SweepOutcomes {
public:
  /// A combination priced: ok, or does_not_fit with its figures.
  void add(Outcome outcome);
  /// A combination stopped by `error` before it was priced: it does not fit (a DoesNotFit), or
  /// cannot run.
  void add(const Error& error);
  /// The first error of a sweep in which nothing ran: the command fails with it as it would
  /// with that one combination alone.
  void throw_if_none_ran() const;
  /// 2 (bad input) when some combination could not run, else 4 when some does not fit, else 0.
  [[nodiscard]] int exit_code() const;

private:
  bool m_ran = false;
  bool m_unfit = false;
  bool m_cannot_run = false;
  std::optional<Error> m_first_error;
};

/// What `error` says of the combination it stopped: does_not_fit for a DoesNotFit, else
/// cannot_run.
[[nodiscard]] Outcome outcome_of(const Error& error);

/// Runs `work`; a combination's error (an InputError or a DoesNotFit) is returned, not thrown.
/// Other errors (I/O, internal) stop the command.
template <class F> std::optional<Error> attempt(F&& work) {
  try {
    work();
  } catch (const InputError& e) {
    return Error(e);
  } catch (const DoesNotFit& e) {
    return Error(e);
  }
  return std::nullopt;
}

/// The row's outcome in words, as JSON, CSV and the notes give it: "ok", "does not fit", "n/a".
[[nodiscard]] std::string status_name(Outcome outcome);
/// The line under a table for a combination that did not run: "llama-3.1-8b on h100-sxm, tp 3:
/// n/a: <reason>".
[[nodiscard]] std::string outcome_note(const std::string& model, const std::string& gpu, u64 tp,
                                       Outcome outcome, const std::string& reason);
/// `status` (status_name) and `reason` (empty when ok).
void describe_outcome(report::Record& r, Outcome outcome, const std::string& reason);

} // namespace kvcalc::cli
