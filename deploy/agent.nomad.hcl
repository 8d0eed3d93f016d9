# The nomad-restart agent as a Nomad service job: replicas share the restarts through each
# restart's lease (no leader), and a replica that stops hands its restarts over at once.
# It runs a release's binary, fetched and checked against the release's SHA256SUMS.
#
#   1. nomad acl policy apply -namespace default -job nomad-restart-agent \
#        nomad-restart-agent deploy/agent-policy.hcl          (with ACLs on; see docs/acl.md)
#   2. nomad job run -var version=1.2.3 deploy/agent.nomad.hcl
#
# The variables (-var name=value, or NOMAD_VAR_name):
#   version             the release to run, without its "v" (required)
#   artifact_base_url   where the release's files are, if not the project's GitHub release:
#                       a mirror (Artifactory, S3, an HTTP server) holding, as released,
#                         nomad-restart_<version>_<os>_<arch>.tar.gz
#                         nomad-restart_<version>_SHA256SUMS
#   count               replicas (3)
#   namespace           the namespaces whose restarts the agents drive: * (default: every
#                       one their token may list), or one, for an agent per team
#   distinct_hosts      one replica per node (true); false lets replicas share a node, as
#                       on a one-node development cluster
#   driver              exec (default), or raw_exec where exec is not available (macOS
#                       clients, or clusters without exec): the binary then runs unisolated
#                       as the Nomad client's user
#
# deploy/agent-docker.nomad.hcl runs the container image instead. See docs/agent.md for the
# flags, metrics and the web page.

variable "version" {
  type        = string
  description = "The nomad-restart release to run, without its v: 1.2.3."

  validation {
    # Nomad's HCL has regex_replace but no regex: a version that matches leaves nothing.
    condition     = regex_replace(var.version, "^[0-9]+\\.[0-9]+\\.[0-9]+([-.][0-9A-Za-z.-]+)?$", "") == ""
    error_message = "The version is a release's number without its v, like -var version=1.2.3."
  }
}

variable "artifact_base_url" {
  type        = string
  description = "The URL of the directory that holds the release's archives and SHA256SUMS; empty: the project's GitHub release of var.version."
  default     = ""
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

variable "driver" {
  type        = string
  description = "The task driver: exec, or raw_exec where exec is not available."
  default     = "exec"

  validation {
    condition     = contains(["exec", "raw_exec"], var.driver)
    error_message = "The driver is exec or raw_exec."
  }
}

locals {
  base_url = trimsuffix(
    var.artifact_base_url != "" ? var.artifact_base_url : "https://github.com/nomad-restart/nomad-restart/releases/download/v${var.version}",
    "/",
  )
  # The release's file names (.goreleaser.yaml): the client's OS and architecture pick the
  # archive, which go-getter checks against the release's checksums before unpacking it.
  archive   = "nomad-restart_${var.version}_${attr.kernel.name}_${attr.cpu.arch}.tar.gz"
  checksums = "nomad-restart_${var.version}_SHA256SUMS"
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
      driver = var.driver

      artifact {
        # go-getter's checksum file form: the line of SHA256SUMS that names the archive.
        # (Nomad's options { checksum = ... } takes only "type:value", not a file.)
        source      = "${local.base_url}/${local.archive}?checksum=file:${local.base_url}/${local.checksums}"
        destination = "local/"
      }

      config {
        command = "local/nomad-restart"
        args = [
          "agent",
          "-http-addr", "${NOMAD_ADDR_http}",
          "-namespace", var.namespace,
          "-concurrency", "500",
          "-log-format", "json",
        ]
      }

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
