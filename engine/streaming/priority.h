// Priority: which work goes first when the engine is busy. Interactive work (a stream whose user
// waits for partial and final results as they speak) goes before bulk work (an offline request
// whose whole answer comes at the end), in the scheduler's queue (engine/streaming/scheduler.h)
// and on the task pools' threads (engine/streaming/task_pool.h). Within one class, order is as
// before (oldest first; strands take turns). Bulk work is never dropped, only ordered after: it
// runs whenever no interactive work is waiting, so it can starve only while interactive work
// alone keeps every thread busy (the server's admission limits bound that).
//
// Thread-safety: a plain enum.
#ifndef JASPER_ENGINE_STREAMING_PRIORITY_H_
#define JASPER_ENGINE_STREAMING_PRIORITY_H_

namespace jasper {

enum class Priority {
  kInteractive = 0,
  kBulk = 1,
};
inline constexpr int kNumPriorities = 2;

}  // namespace jasper

#endif  // JASPER_ENGINE_STREAMING_PRIORITY_H_
