#include "sweep.hpp"

namespace kvcalc::cli {

void SweepOutcomes::add(Outcome outcome) {
  if (outcome == Outcome::cannot_run) {
    m_cannot_run = true;
    return;
  }
  m_ran = true;
  m_unfit = m_unfit || outcome == Outcome::does_not_fit;
}

Outcome outcome_of(const Error& error) {
  return error.code() == ExitCode::does_not_fit ? Outcome::does_not_fit : Outcome::cannot_run;
}

void SweepOutcomes::add(const Error& error) {
  if (outcome_of(error) == Outcome::does_not_fit) {
    m_unfit = true;
  } else {
    m_cannot_run = true;
  }
  if (!m_first_error) {
    m_first_error = error;
  }
}

void SweepOutcomes::throw_if_none_ran() const {
  if (!m_ran && m_first_error) {
    throw *m_first_error;
  }
}

int SweepOutcomes::exit_code() const {
  if (m_cannot_run) {
    return static_cast<int>(ExitCode::bad_input);
  }
  return static_cast<int>(m_unfit ? ExitCode::does_not_fit : ExitCode::ok);
}

std::string status_name(Outcome outcome) {
  return outcome == Outcome::ok ? "ok" : outcome == Outcome::does_not_fit ? "does not fit" : "n/a";
}

std::string outcome_note(const std::string& model, const std::string& gpu, u64 tp, Outcome outcome,
                         const std::string& reason) {
  return model + " on " + gpu + ", tp " + group_digits(tp) + ": " + status_name(outcome) + ": " +
         reason;
}

void describe_outcome(report::Record& r, Outcome outcome, const std::string& reason) {
  r.value("status", report::Cell::text(status_name(outcome)));
  r.value("reason", outcome == Outcome::ok ? report::Cell::empty() : report::Cell::text(reason));
}

} // namespace kvcalc::cli
