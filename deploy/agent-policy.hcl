# ACL policy for the nomad-restart agent (least privilege).
#
# Apply it to the agent's workload identity (see docs/acl.md):
#
#   nomad acl policy apply -namespace default -job nomad-restart-agent \
#     -description "nomad-restart agent" nomad-restart-agent deploy/agent-policy.hcl
#
# or to a token for an agent run outside Nomad:
#
#   nomad acl policy apply -description "nomad-restart agent" nomad-restart-agent deploy/agent-policy.hcl
#   nomad acl token create -name nomad-restart-agent -policy nomad-restart-agent
#
# Replace "*" with the namespaces the agent should serve to narrow it further.
namespace "*" {
  # list-jobs: job lookup by prefix; read-job: jobs, versions, allocations, deployments,
  # evaluations, checks and the event stream; alloc-lifecycle: restart (in place) and stop
  # (-reschedule) allocations; submit-job: only to force an evaluation of a system job
  # restarted with -reschedule (remove it if you never do that); read-fs: rollouts on
  # re-renders read when Nomad last wrote the templates of opted-in jobs (a listing of the
  # template's directory, never a file's content: Nomad refuses to read secrets/ anyway);
  # without it, only change_mode signal and script templates are followed.
  capabilities = ["list-jobs", "read-job", "alloc-lifecycle", "submit-job", "read-fs"]

  variables {
    # Restart records, their chunks, per-job markers and the drivers' leases (locks).
    path "nomad-restart/*" {
      capabilities = ["list", "read", "write", "destroy"]
    }
    # Config-change rollouts (-roll-on-change): the variables that opted-in jobs'
    # templates read are watched by their metadata, which needs "list" only, never
    # "read". nomad/jobs/* is where Nomad's workload identities read by default; add the
    # paths your templates read elsewhere, or remove this block with -roll-on-change=false.
    # Jobs that revert failed changes (nomad-restart.on-failure = "revert") need the agent
    # to read the variables they read (to keep the value a change replaces) and write them
    # (to put it back): grant "read" and "write" on their paths only. A glob "web/*" does
    # not cover the variable "web" itself, so for job web's variables, for example:
    #   path "nomad/jobs/web"   { capabilities = ["list", "read", "write"] }
    #   path "nomad/jobs/web/*" { capabilities = ["list", "read", "write"] }
    # and, for a Consul key, key "web/mode" { policy = "write" } in the agent's Consul token.
    # Without it, the agent logs the rule to grant and such a failed rollout stops.
    path "nomad/jobs/*" {
      capabilities = ["list"]
    }
    # Notification sinks kept as secrets (-notify NAME=nomadvar://nomad-restart-notify/<path>#<key>):
    # read only, on a path of their own that operators' policy does not grant, so that a
    # webhook's secret is read by the agent alone. Remove it if no sink URL is kept there.
    path "nomad-restart-notify/*" {
      capabilities = ["read"]
    }
  }
}
