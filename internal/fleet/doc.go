// Package fleet is the pure domain of fleet restarts: many jobs restarted under one ID, each
// through an ordinary restart record of its own (its child), with a limit on how many jobs
// restart at once and a budget of failed jobs. Like package restart it does no I/O: the
// driver observes the children and Nomad, tells Observe what it saw, asks Next what to do,
// does it and records the result. So every rule below is tested without a cluster.
//
// The rules:
//
//   - The selection is fixed when the fleet is created, in the order Order gives: a job
//     created later is never added, and each selected job is restarted at most once per
//     fleet (a job's child, once recorded, is the only one it will ever have; a job that
//     reached an end never starts again).
//   - At most Options.MaxParallelJobs children run at once. A child that is paused or waiting
//     for an answer still counts: it holds allocations mid-restart.
//   - Once more than Options.MaxFailedJobs jobs have failed, nothing new starts. The children
//     still running finish (a half-restarted job is worse than a finished one); then
//     Options.OnError decides: "fail" ends the fleet failed, "ask" leaves it waiting for an
//     operator, who continues by raising MaxFailedJobs or stops it with a cancel.
//   - A job that has another restart in progress is never restarted twice at once: under
//     Busy "wait" it stays pending (passed over, so it does not hold up the jobs after it)
//     until that restart ends; under "skip" it is skipped with the reason.
//   - A job purged from Nomad before its turn is skipped with the reason. Once its child
//     exists, the child's own status tells how it ended.
//   - Pause: nothing new starts and the fleet is paused at once; the pause is forwarded to
//     the running children, which pause after their batch as any restart does. Resume
//     forwards "run" only to the children the fleet paused, so a child an operator paused
//     on its own stays paused.
//   - Cancel: nothing new starts, the jobs not started are recorded canceled, the running
//     children are canceled, and the fleet is canceled once none of them runs any more.
//   - Waves (waves.go): a job that names upstreams starts only once each gave its evidence
//     (an upstream in the fleet restarted, then was measured healthy with its gates held;
//     one outside it was measured healthy), recorded before the start is decided. An
//     upstream that failed holds the jobs after it: skipped with the reason while the
//     failure budget holds, else left to -on-error, where an operator's yes releases them.
//   - The fleet succeeds when every job succeeded or was skipped for a recorded reason. A
//     job that failed, or whose child an operator canceled on its own, was not restarted:
//     the fleet then ends failed, although such a cancel does not count against the budget
//     (it was an operator's choice, not a fault that should stop the other jobs).
package fleet
