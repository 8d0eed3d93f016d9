// Package notify decides what to tell people of restarts and fleets, and says it: the
// triggers a record's events raise and their severity, who hears which (the agent's
// defaults, a job's meta, a restart's own subscriptions), the notifications still owed
// to each sink (a record's outbox, restart.Notifications), their text and their JSON body,
// and the rate limit that folds a flood into one summary. It is pure: the package that
// sends (notify/deliver) observes, asks, sends and records.
package notify
