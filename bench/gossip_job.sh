# gossip_job.sh - sourced by bench/gossip.sh, gossip-accuracy.sh and
# gossip-plot.sh: the one 4-worker job on 127.0.0.1 they all run (the MNIST
# MLP, batch 32, seed 7, SGD lr 0.1 x 4 with one warm-up epoch) and the
# train.gossip lines of each mode name.

# gossip_mode_lines MODE: allreduce (none), TOPOLOGY (sync), async,
# async-fixed (adaptive: false), async-TOPOLOGY
gossip_mode_lines() {
  case $1 in
    allreduce) ;;
    async) printf '  sync: gossip\n  gossip: {mode: async}\n' ;;
    async-fixed) printf '  sync: gossip\n  gossip: {mode: async, adaptive: false}\n' ;;
    async-*) printf '  sync: gossip\n  gossip: {mode: async, topology: %s}\n' "${1#async-}" ;;
    *) printf '  sync: gossip\n  gossip: {topology: %s}\n' "$1" ;;
  esac
}

# gossip_job_yaml FILE NAME DATA EPOCHS [TRAIN LINES]: the cluster file, on
# ports of its own
gossip_job_yaml() {
  local port=$((20000 + 10 * (RANDOM % 1200)))
  cat >"$1" <<YAML
cluster:
  name: $2
  launcher: local
  port_base: $port
  seeds: ["127.0.0.1:$((port + 1))"]
  nodes:
    - {host: 127.0.0.1, workers: 4}
train:
  model: mnist_mlp
  data: $3
  epochs: $4
  batch_size: 32
  seed: 7
  optimizer: {name: sgd, lr: 0.1, warmup_epochs: 1}
${5:-}
YAML
}
