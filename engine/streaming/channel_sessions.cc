#include "engine/streaming/channel_sessions.h"

#include <algorithm>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/audio/audio_input.h"

namespace jasper {

// Shared by the channels' callbacks, which may outlive the ChannelSessions object (a callback
// in progress while it is destroyed): the outer callbacks, the count of channels not yet done,
// the status to end with, and the sessions to cancel on a channel's error (cleared, under mu,
// before the sessions are destroyed).
struct ChannelSessions::Join {
  Callbacks outer;
  std::mutex mu;
  int remaining = 0;
  absl::Status status;                   // the first error; OK until one
  std::vector<StreamSession*> sessions;  // not owned; empty once the owner is going

  void OnDone(absl::Status s) {
    bool last = false;
    absl::Status end;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!s.ok() && status.ok()) {
        status = s;
        // Cancel() posts the others' on_done (CANCELLED); it never calls back in here.
        for (StreamSession* session : sessions) session->Cancel();
      }
      last = --remaining == 0;
      end = status;
    }
    if (last) outer.on_done(end);
  }
};

absl::StatusOr<std::unique_ptr<ChannelSessions>> ChannelSessions::Create(int channels,
                                                                         const SessionMaker& make,
                                                                         Callbacks callbacks) {
  if (channels < 2 || channels > kMaxInputChannels) {
    return absl::InvalidArgumentError(absl::StrCat("per-channel recognition needs 2 to ",
                                                   kMaxInputChannels, " channels, got ", channels));
  }
  if (!callbacks.on_done) return absl::InvalidArgumentError("ChannelSessions: on_done is required");
  auto join = std::make_shared<Join>();
  join->outer = std::move(callbacks);
  join->remaining = channels;
  std::vector<std::unique_ptr<StreamSession>> sessions;
  for (int c = 0; c < channels; ++c) {
    Callbacks inner;
    if (join->outer.on_result) {
      inner.on_result = [join, c](const SessionResult& r) {
        SessionResult tagged = r;
        tagged.channel = c;
        join->outer.on_result(tagged);
      };
    }
    if (join->outer.on_space_available) {
      inner.on_space_available = [join] { join->outer.on_space_available(); };
    }
    inner.on_done = [join](absl::Status s) { join->OnDone(std::move(s)); };
    absl::StatusOr<std::unique_ptr<StreamSession>> session = make(c, std::move(inner));
    if (!session.ok()) return session.status();  // the ones made are destroyed: cancelled
    sessions.push_back(*std::move(session));
  }
  {
    std::lock_guard<std::mutex> lock(join->mu);
    for (const auto& s : sessions) join->sessions.push_back(s.get());
  }
  return std::unique_ptr<ChannelSessions>(new ChannelSessions(join, std::move(sessions)));
}

ChannelSessions::ChannelSessions(std::shared_ptr<Join> join,
                                 std::vector<std::unique_ptr<StreamSession>> sessions)
    : join_(std::move(join)), sessions_(std::move(sessions)) {}

ChannelSessions::~ChannelSessions() {
  {
    std::lock_guard<std::mutex> lock(join_->mu);
    join_->sessions.clear();  // a channel's error can no longer reach the sessions
  }
  sessions_.clear();  // each cancels silently
}

absl::Status ChannelSessions::ForEach(absl::Status (StreamSession::*fn)()) {
  absl::Status first;
  for (const auto& s : sessions_) first.Update(((*s).*fn)());
  return first;
}

absl::Status ChannelSessions::PushAudio(absl::Span<const uint8_t> bytes) {
  absl::Status first;
  for (const auto& s : sessions_) first.Update(s->PushAudio(bytes));
  return first;
}

bool ChannelSessions::CanAcceptAudio() const {
  bool all = true;
  for (const auto& s : sessions_) all = s->CanAcceptAudio() && all;  // ask every one
  return all;
}

absl::Status ChannelSessions::ForceFinal() { return ForEach(&StreamSession::ForceFinal); }
absl::Status ChannelSessions::Finish() { return ForEach(&StreamSession::Finish); }

void ChannelSessions::Cancel() {
  for (const auto& s : sessions_) s->Cancel();
}

int64_t ChannelSessions::buffered_audio_ms() const {
  int64_t most = 0;
  for (const auto& s : sessions_) most = std::max(most, s->buffered_audio_ms());
  return most;
}

}  // namespace jasper
