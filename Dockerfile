# The nomad-restart container image. GoReleaser builds it (.goreleaser.yaml, dockers_v2)
# from the release's static linux binaries, which it lays out as <os>/<arch>/nomad-restart
# in the build context; it is not meant for a plain `docker build` of the source tree.
#
# distroless/static: no shell, no package manager, CA certificates and time zone data
# (schedules' -time-zone) included; its "nonroot" user is uid 65532.
FROM gcr.io/distroless/static-debian12:nonroot

ARG TARGETPLATFORM
COPY $TARGETPLATFORM/nomad-restart /usr/local/bin/nomad-restart

USER 65532:65532

# The agent's page, /healthz and /metrics (give -http-addr 0.0.0.0:9646 in a container).
EXPOSE 9646

ENTRYPOINT ["/usr/local/bin/nomad-restart"]
CMD ["agent", "-http-addr", "0.0.0.0:9646"]
