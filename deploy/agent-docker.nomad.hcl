# The nomad-restart agent as a Nomad service job, from the release's container image (the
# Dockerfile's: the static binary on a distroless base, as a non-root user). The same job as
# deploy/agent.nomad.hcl otherwise; read that file's comments.
#
#   1. nomad acl policy apply -namespace default -job nomad-restart-agent \
#        nomad-restart-agent deploy/agent-policy.hcl          (with ACLs on; see docs/acl.md)
#   2. nomad job run -var image=ghcr.io/nomad-restart/nomad-restart:1.2.3 deploy/agent-docker.nomad.hcl
#
# The variables: image (required: the image with its tag, or a mirror's copy of it), count
# (3), namespace (*: the namespaces whose restarts the agents drive) and distinct_hosts
# (true).

variable "image" {
  type        = string
  description = "The nomad-restart image and tag: ghcr.io/nomad-restart/nomad-restart:1.2.3."
}

variable "count" {
  type        = number
  description = "How many agents run."
  default     = 3
}

variable "namespace" {
  type        = string
  description = "The namespaces whose restarts the agents drive: * (every one their token may list), or one namespace."
  default     = "*"
}

variable "distinct_hosts" {
  type        = bool
  description = "Place at most one agent on a node, so that losing a node loses one agent."
  default     = true
}

job "nomad-restart-agent" {
  type = "service"

  group "agent" {
    count = var.count

    constraint {
      operator = "distinct_hosts"
      value    = var.distinct_hosts
    }

    # Take the agent out of the service catalog a moment before it is told to stop.
    shutdown_delay = "5s"

    update {
      max_parallel     = 1
      min_healthy_time = "10s"
      healthy_deadline = "3m"
    }

    network {
      port "http" {
        to = 9646
      }
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
      driver = "docker"

      config {
        image = var.image
        args = [
          "agent",
          "-http-addr", "0.0.0.0:9646",
          "-namespace", var.namespace,
          "-concurrency", "500",
          "-log-format", "json",
        ]
        ports = ["http"]
      }

      identity {
        env         = true
        change_mode = "restart"
      }

      env {
        # The Task API socket, which Nomad mounts into the container's secrets directory.
        NOMAD_ADDR = "unix://${NOMAD_SECRETS_DIR}/api.sock"
      }

      kill_signal  = "SIGTERM"
      kill_timeout = "30s"

      resources {
        cpu    = 200
        memory = 256
      }
    }
  }
}
