# The nomad-restart agent as a Nomad service job: three replicas share the restarts through
# each restart's lease (no leader), and a replica that stops hands its restarts over at once.
#
#   1. nomad acl policy apply -namespace default -job nomad-restart-agent \
#        nomad-restart-agent deploy/agent-policy.hcl          (with ACLs on; see docs/acl.md)
#   2. Put the binary where the artifact below can fetch it (or use the docker variant).
#   3. nomad job run deploy/agent.nomad.hcl
#
# See docs/agent.md for the flags, metrics and the web page.
job "nomad-restart-agent" {
  type = "service"

  group "agent" {
    count = 3

    # One replica per node, so that losing a node loses one replica.
    constraint {
      operator = "distinct_hosts"
      value    = "true"
    }

    update {
      max_parallel     = 1
      min_healthy_time = "10s"
      healthy_deadline = "3m"
    }

    network {
      port "http" {}
    }

    service {
      name     = "nomad-restart-agent"
      port     = "http"
      provider = "nomad"
      tags     = ["metrics"]

      check {
        type     = "http"
        path     = "/healthz"
        interval = "10s"
        timeout  = "2s"
      }
    }

    task "agent" {
      driver = "exec"

      # PLACEHOLDER: where your build of nomad-restart is published. Replace the URL (and
      # add a checksum option) before running this job.
      artifact {
        source      = "https://example.invalid/nomad-restart/nomad-restart_linux_amd64.tar.gz"
        destination = "local/"
      }

      config {
        command = "local/nomad-restart"
        args = [
          "agent",
          "-http-addr", "${NOMAD_ADDR_http}",
          "-namespace", "*",
          "-concurrency", "500",
          "-log-format", "json",
        ]
      }

      # Docker variant (PLACEHOLDER image name): replace the artifact and config above with
      # the lines below, and give the port an inside port: network { port "http" { to = 9646 } }.
      #
      #   driver = "docker"
      #   config {
      #     image = "registry.example.invalid/nomad-restart:latest"
      #     args  = ["agent", "-http-addr", "0.0.0.0:9646", "-log-format", "json"]
      #     ports = ["http"]
      #   }

      # The agent's own token: its workload identity, with the policy of
      # deploy/agent-policy.hcl attached to this job (step 1 above).
      identity {
        env         = true
        change_mode = "restart"
      }

      env {
        # The local Nomad agent's Task API socket: reachable from the task whatever its
        # network mode, no TLS setup needed, authenticated by the identity above.
        NOMAD_ADDR = "unix://${NOMAD_SECRETS_DIR}/api.sock"
      }

      # Alternative to the workload identity: a token kept in a Nomad variable that this job
      # may read (nomad var put nomad/jobs/nomad-restart-agent token=<secret>). Remove the
      # identity block above when using it.
      #
      # template {
      #   destination = "${NOMAD_SECRETS_DIR}/token.env"
      #   env         = true
      #   change_mode = "restart"
      #   data        = <<-EOT
      #   {{ with nomadVar "nomad/jobs/nomad-restart-agent" }}NOMAD_TOKEN={{ .token }}{{ end }}
      #   EOT
      # }

      # SIGTERM makes the agent finish each restart's step in flight, record that it let
      # go and release its leases; give it time to do so.
      kill_signal  = "SIGTERM"
      kill_timeout = "30s"

      resources {
        cpu    = 200
        memory = 256
      }
    }
  }
}
