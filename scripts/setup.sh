#!/usr/bin/env bash
# Installs every build and test dependency of zernel-sched on Debian 12 (bookworm), from Debian's
# own packages. Idempotent: packages already present are left alone, nothing is upgraded, and no
# other suite is used. Run as root (or through sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libtomlplusplus-dev libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev libcpp-httplib-dev
  # Boost.Beast's HTTP/1 parser (header-only): the HTTP front (src/telemetry/http_request.cpp)
  libboost1.74-dev
  # gRPC and protobuf: the kubelet pod-resources client (src/collect/pod_resources.cpp, its
  # .proto compiled at build time) and tools/pod_resources_server
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  valgrind python3
  # used by the integration tests: HTTP scrapes, socket checks, uid switching, CPU pinning
  curl iproute2 util-linux
  # A real PyTorch training loop (CPU build) under the daemon: tools/torch_job.py,
  # tests/integration/pytorch_test.sh.
  python3-torch
  # A real Prometheus server and promtool scrape /metrics (tests/integration/prometheus_test.sh).
  prometheus
  # BPF toolchain (cmake/Bpf.cmake): clang for -target bpf; libbpf and bpftool are built from the
  # test kernel's own source and need these; xz/zstd unpack the kernel source and vmlinuz.
  clang-19 libelf-dev zlib1g-dev libzstd-dev zstd xz-utils make
  # libFuzzer + ASan runtime for clang-19 (fuzz/run.sh)
  libclang-rt-19-dev
  # clang-tidy (scripts/lint.sh, .clang-tidy) and clang-format on changed lines
  # (scripts/format-check.sh), the same LLVM 19 as the BPF compiler.
  clang-tidy-19 clang-format-19
  # VM tests (tests/vm): busybox-static initramfs, and the shared libraries of the QEMU 10 binary
  # that cmake/Bpf.cmake unpacks from bookworm-backports (all plain bookworm packages).
  busybox-static cpio
  # stress-ng in the guest (tests/vm/kubelet_stress_test.sh adds it with its libraries): the
  # sched_ext project's CI kind of stress (cpu, fork, affinity, switch, futex, yield).
  stress-ng
  libaio1 libbpf1 libcapstone4 libfdt1 libfuse3-3 libglib2.0-0 libgnutls30 libibverbs1
  libjpeg62-turbo libnuma1 libpixman-1-0 libpmem1 libpng16-16 librdmacm1 libsasl2-2
  libseccomp2 libslirp0 liburing2 libvdeplug2
  # The man page, generated from --help at build time (cmake/ManPage.cmake); man-db renders it
  # in tests/integration/install_test.sh.
  help2man man-db
  # The OCI image recipe (deploy/image/build.sh, tests/integration/image_test.sh); the rendered
  # Kubernetes manifests are parsed by tests/integration/kustomize_test.sh with python3-yaml.
  buildah python3-yaml
)
# kubectl (with kustomize built in) renders deploy/kubernetes (tests/integration/kustomize_test.sh):
# Debian's kubernetes-client, unless a kubectl is installed already (another package's kubectl
# would conflict with it).
if ! command -v kubectl > /dev/null; then packages+=(kubernetes-client); fi

# tracefs: the probes no longer need it (BTF and raw tracepoints and uprobes attach without
# it, docs/probes.md); kept mounted for perf and bpftool, and a fresh machine may boot without.
if [[ $(id -u) -eq 0 ]] && ! mountpoint -q /sys/kernel/tracing; then
  mount -t tracefs nodev /sys/kernel/tracing && echo "setup: mounted tracefs on /sys/kernel/tracing"
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# --no-upgrade: never upgrade what the base system already has.
$SUDO apt-get install -y -qq --no-install-recommends --no-upgrade "${missing[@]}"
echo "setup: done"
