// Package fleetrun drives fleet restarts: many jobs restarted under one ID, each through an
// ordinary restart record of its own (the job's child), filed when the job's turn comes.
//
// The rules (what starts next, how a child's end maps onto its job, pause, cancel, the
// failure budget) are package fleet's; this package observes, asks fleet.Next, acts and
// records. Its own rules are about durability:
//
//   - A child's ID derives from the fleet and the job (fleet.ChildID), and its start is
//     stored in the fleet record (the job running, with that ID) before the child is
//     created. A driver that dies at any instant leaves either a recorded start whose child
//     the next driver creates (a second Create meets store.ErrExists), or no start at all:
//     each job is restarted once per fleet.
//   - A child whose creation finds the job busy with another restart is taken back
//     (fleet.Unstart): the job waits for that restart (-busy wait) or is skipped.
//   - Children are driven in this process (the CLI: Config.DriveChildren) or by whoever
//     adopts detached restarts (the agent); either way the fleet follows each child's
//     record to its end. A child held by another driver is followed until it ends or its
//     lease frees, and then driven here.
//   - A job outside the fleet's home namespace is restarted only when its namespace holds
//     the fleet's member marker naming it (store.Fleets.FleetMember, read once per
//     namespace per drive): the record is only as trusted as its home's variables, and
//     the marker is the consent of someone with rights in the job's namespace. Without
//     it the job fails, naming the marker and the fix (consent.go).
//   - In a fleet in waves, the evidence of each upstream a pending job waits on
//     (fleet.Unproven) is measured off the loop (follow.go, Engine.Evidence) and its verdict
//     stored before any job after it starts, since starts are decided from the stored
//     record. A driver that dies while measuring leaves no verdict: the next one measures
//     again from the start.
//   - The driver's own writes are one per change of the fleet (a job's start and the end
//     that freed its slot are one write). Operators' steering rings the fleet's control
//     bell, so the driver reads its record only when an operator acted.
package fleetrun
