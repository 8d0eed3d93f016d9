# ACL policy for operators who start and steer restarts with nomad-restart (see docs/acl.md).
#
#   nomad acl policy apply -description "nomad-restart operators" nomad-restart-operator deploy/operator-policy.hcl
#
# Replace "*" with the namespaces these operators may restart jobs in.
namespace "*" {
  # Planning a restart reads the job; `run` without -detach drives it, which needs
  # alloc-lifecycle. Operators who only file restarts for the agent (`run -detach`) and steer
  # them (status, attach, pause, resume, cancel, answer) need list-jobs and read-job only;
  # `resume` of a restart nobody drives makes the operator its driver and needs
  # alloc-lifecycle too. read-fs: `stale` and `run -stale-only` read when Nomad last wrote
  # each template (a directory listing, not the files' content).
  capabilities = ["list-jobs", "read-job", "alloc-lifecycle", "read-fs"]

  variables {
    path "nomad-restart/*" {
      capabilities = ["list", "read", "write", "destroy"]
    }
    # The previous values of changed variables and Consul keys, kept by the agent for jobs
    # that revert failed config changes (nomad-restart.on-failure = "revert"): read and
    # written by the agent's token alone. Nomad applies the closest matching path, so this
    # rule wins over the one above.
    path "nomad-restart/~kept/*" {
      capabilities = ["deny"]
    }
  }
}
