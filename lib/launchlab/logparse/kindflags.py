"""The long flags the SGLang and vLLM servers take, as the kit read them off each release's own argument dump: the
lists behind ServerKind.known_flags, against which a params file's flags are checked (params/serverflags.py).

Neither server prints its --help in a log, but both print their arguments when they start: SGLang every field of
`server_args=ServerArgs(…)` (each one a flag, `_` written `-`), vLLM the arguments a command set (`non-default args:
{…}`) and its engine's configuration (`Initializing a V1 LLM engine (v0.26.0) with config: …`). The names below are
those, from the real logs the repository keeps (vLLM's with a few common flags its logs do not show); a release
before or after may add or drop some, so a flag outside a list is a warning with the nearest known flag, never an
error. The flags a kind's own record names (its model flag, its states' settings, …) are added to its list by
ServerKind.flag_names.
"""

from __future__ import annotations

from launchlab.logparse.serverkind import KnownFlags


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


# every field of `server_args=ServerArgs(…)` in the SGLang 0.5.17 logs of examples/h200-sglang-kv/ (captured on an
# H200, 2026-12-03), at its top level, as a flag: `mem_fraction_static` → `--mem-fraction-static`
SGLANG = KnownFlags("0.5.17", _names("""
--model-path --tokenizer-path --tokenizer-mode --tokenizer-backend --tokenizer-worker-num --detokenizer-worker-num
--skip-tokenizer-init --load-format --model-loader-extra-config --trust-remote-code --context-length --is-embedding
--enable-multimodal --revision --model-impl --model-config-parser --json-model-override-args --dtype --quantization
--quantization-param-path --kv-cache-dtype --enable-fp32-lm-head --modelopt-quant --modelopt-checkpoint-restore-path
--modelopt-checkpoint-save-path --modelopt-export-path --quantize-and-serve --rl-quant-profile --enable-tf32-matmul
--mem-fraction-static --max-running-requests --max-queued-requests --max-total-tokens --chunked-prefill-size
--enable-dynamic-chunking --max-prefill-tokens --prefill-max-requests --schedule-policy --enable-priority-scheduling
--disable-priority-preemption --default-priority-value --abort-on-priority-when-disabled
--schedule-low-priority-values-first --priority-scheduling-preemption-threshold --retraction-policy
--schedule-conservativeness --page-size --swa-full-tokens-ratio --disable-hybrid-swa-memory --radix-eviction-policy
--prefill-only-disable-kv-cache --disable-radix-cache --enable-page-major-kv-layout --enable-unified-memory
--disable-chunked-prefix-cache --disable-overlap-schedule --num-continuous-decode-steps --scheduler-recv-interval
--enable-mixed-chunk --nccl-port --dist-timeout --dist-init-addr --nnodes --node-rank --tp-size --dcp-size --pp-size
--pp-max-micro-batch-size --pp-async-batch-depth --dp-size --load-balance-method --attn-cp-size --moe-dp-size
--dwdp-size --dcp-comm-backend --dcp-replicate-q-proj --enable-prefill-cp --cp-strategy
--enable-dsa-cache-layer-split --enable-dsa-prefill-context-parallel --dsa-prefill-cp-mode
--enable-prefill-context-parallel --prefill-cp-mode --enable-cp-decode-attn-tp --enable-dp-attention
--enable-dp-attention-local-control-broadcast --enable-dp-lm-head --enable-attn-tp-input-scattered
--disable-attn-tp-gather --enable-p2p-check --device --base-gpu-id --gpu-id-step --random-seed --watchdog-timeout
--soft-watchdog-timeout --sleep-on-idle --use-ray --custom-sigquit-handler --numa-node --gc-threshold --host --port
--fastapi-root-path --smg-grpc-mode --grpc-mode --grpc-port --sidecar --sidecar-args --skip-server-warmup --warmups
--enable-http2 --ssl-keyfile --ssl-certfile --ssl-ca-certs --ssl-keyfile-password --enable-ssl-refresh --api-key
--admin-api-key --served-model-name --weight-version --chat-template --hf-chat-template-name --completion-template
--file-storage-path --enable-cache-report --reasoning-parser --default-chat-template-kwargs --strip-thinking-cache
--enable-strict-thinking --tool-call-parser --tool-server --sampling-defaults --asr-max-buffer-seconds
--asr-max-concurrent-sessions --preferred-sampling-params --allow-auto-truncate --stream-interval
--batch-notify-size --stream-response-default-include-usage --incremental-streaming-output
--enable-streaming-session --enable-session-radix-cache --log-level --log-level-http --log-requests
--log-requests-level --log-requests-format --log-requests-target --uvicorn-access-log-exclude-prefixes
--crash-dump-folder --show-time-cost --enable-metrics --smg-http-sidecar-port --enable-mfu-metrics
--enable-metrics-for-all-schedulers --load-snapshot-publish-interval --tokenizer-metrics-custom-labels-header
--tokenizer-metrics-allowed-custom-labels --extra-metric-labels --bucket-time-to-first-token
--bucket-inter-token-latency --bucket-e2e-request-latency --prompt-tokens-buckets --generation-tokens-buckets
--gc-warning-threshold-secs --decode-log-interval --enable-request-time-stats-logging --kv-events-config
--enable-forward-pass-metrics --forward-pass-metrics-worker-id --forward-pass-metrics-ipc-name --enable-trace
--trace-modules --otlp-traces-endpoint --export-metrics-to-file --export-metrics-to-file-dir --stat-loggers
--constrained-json-whitespace-pattern --constrained-json-disable-any-whitespace --attention-backend
--decode-attention-backend --prefill-attention-backend --sampling-backend --grammar-backend --radix-cache-backend
--mm-attention-backend --fp8-gemm-runner-backend --fp4-gemm-runner-backend --bf16-gemm-backend --dsa-prefill-backend
--dsa-decode-backend --dsa-paged-mqa-logits-backend --dsa-topk-backend --disable-flashinfer-autotune
--flashinfer-autotune-skip-ops --mamba-backend --cuda-graph-config --cuda-graph-backend-decode
--cuda-graph-backend-prefill --cuda-graph-max-bs-decode --cuda-graph-max-bs-prefill --cuda-graph-bs-decode
--cuda-graph-bs-prefill --cuda-graph-tc-compiler --disable-prefill-cuda-graph --disable-decode-cuda-graph
--disable-cuda-graph --disable-cuda-graph-padding --enable-profile-cuda-graph --enable-cudagraph-gc
--debug-cuda-graph --enable-layerwise-nvtx-marker --enable-nccl-nvls --enable-symm-mem
--triton-attention-reduce-in-fp32 --triton-attention-num-kv-splits --triton-attention-split-tile-size
--flashinfer-mla-disable-ragged --enable-fused-qk-norm-rope --enable-precise-embedding-interpolation
--enable-fused-moe-sum-all-reduce --enable-deepseek-v4-fp4-indexer --disable-custom-all-reduce --enable-mscclpp
--enable-torch-symm-mem --enable-scattered-sconv --pre-warm-nccl --enable-quant-communications
--enable-flashinfer-allreduce-fusion --enforce-disable-flashinfer-allreduce-fusion
--flashinfer-allreduce-fusion-backend --enable-aiter-allreduce-fusion --enable-torch-compile
--enable-torch-compile-debug-mode --torch-compile-max-bs --torchao-config --speculative-algorithm
--speculative-draft-model-path --speculative-draft-model-revision --speculative-draft-load-format
--speculative-num-steps --speculative-eagle-topk --speculative-num-draft-tokens --speculative-dflash-block-size
--speculative-dspark-block-size --speculative-dspark-sps-table-path --speculative-dspark-confidence-sts-path
--speculative-dspark-align-verify-tokens-to-graph-tier --speculative-accept-threshold-single
--speculative-accept-threshold-acc --speculative-use-rejection-sampling --speculative-token-map
--speculative-attention-mode --speculative-draft-attention-backend --speculative-draft-window-size
--speculative-moe-runner-backend --speculative-moe-a2a-backend --speculative-draft-model-quantization
--speculative-skip-dp-mlp-sync --enable-multi-layer-eagle --speculative-adaptive --speculative-adaptive-config
--decoupled-spec-bind-endpoint --decoupled-spec-connect-endpoints --decoupled-spec-rank --decoupled-spec-role
--spec-trace-dir --speculative-ngram-min-bfs-breadth --speculative-ngram-max-bfs-breadth
--speculative-ngram-match-type --speculative-ngram-max-trie-depth --speculative-ngram-capacity
--speculative-ngram-external-corpus-path --speculative-ngram-external-sam-budget
--speculative-ngram-external-corpus-max-tokens --ep-size --moe-a2a-backend --moe-runner-backend
--flashinfer-mxfp4-moe-precision --deepep-mode --fuseep-mode --deepep-dispatcher-output-dtype
--ep-num-redundant-experts --ep-dispatch-algorithm --init-expert-location --enable-eplb --eplb-algorithm
--eplb-rebalance-num-iterations --eplb-rebalance-layers-per-chunk --eplb-min-rebalancing-utilization-threshold
--expert-distribution-recorder-mode --expert-distribution-recorder-buffer-size --enable-expert-distribution-metrics
--deepep-config --moe-dense-tp-size --elastic-ep-backend --enable-elastic-expert-backup --mooncake-ib-device
--enable-waterfill --ep-join-mode --ep-join-rank-offset --elastic-ep-initial-size --max-ep-size
--elastic-ep-scale-timeout --elastic-ep-rejoin --disable-flashinfer-cutlass-moe-fp4-allgather
--disable-shared-experts-fusion --enforce-shared-experts-fusion --max-mamba-cache-size --mamba-ssm-dtype
--mamba-max-states-per-path --enable-mamba-cache-stochastic-rounding --mamba-cache-philox-rounds
--mamba-full-memory-ratio --mamba-radix-cache-strategy --uses-mamba-radix-cache --mamba-track-interval
--enable-int8-mamba-checkpoint --int8-mamba-ckpt-size --linear-attn-backend --linear-attn-decode-backend
--linear-attn-prefill-backend --linear-attn-verify-backend --enable-linear-replayssm --linear-replayssm-cache-len
--enable-linear-replayssm-spec --enable-hierarchical-cache --hicache-ratio --hicache-size --hicache-write-policy
--hicache-io-backend --hicache-mem-layout --hicache-storage-backend --hicache-storage-prefetch-policy
--hicache-storage-backend-extra-config --enable-hisparse --hisparse-config --enable-broadcast-mm-inputs-process
--enable-prefix-mm-cache --mm-enable-dp-encoder --mm-process-config --mm-processor-worker-num --mm-io-worker-num
--limit-mm-data-per-request --enable-mm-global-cache --disable-fast-image-processor --mm-feature-transport
--keep-mm-feature-on-device --enable-lora --enable-lora-overlap-loading --max-lora-rank --lora-target-modules
--lora-paths --max-loaded-loras --max-loras-per-batch --lora-eviction-policy --lora-backend --max-lora-chunk-size
--experts-shared-outer-loras --lora-use-virtual-experts --lora-strict-loading --lora-drain-wait-threshold
--enable-two-batch-overlap --enable-single-batch-overlap --tbo-token-distribution-threshold --cpu-offload-gb
--offload-group-size --offload-num-in-group --offload-prefetch-step --offload-mode --enable-lmcache
--lmcache-config-file --enable-flexkv --flexkv-config-file --kt-weight-path --kt-method --kt-cpuinfer
--kt-threadpool-count --kt-num-gpu-experts --kt-max-deferred-experts-per-token --dllm-algorithm
--dllm-algorithm-config --dllm-fdfo --disaggregation-mode --disaggregation-transfer-backend
--disaggregation-bootstrap-port --disaggregation-ib-device --disaggregation-decode-enable-radix-cache
--disaggregation-decode-enable-offload-kvcache --num-reserved-decode-tokens --disaggregation-decode-extra-slots
--disaggregation-decode-polling-interval --optimistic-prefill-attempts --encoder-only --language-only
--encoder-transfer-backend --encoder-urls --encoder-bootstrap-port --encoder-register-urls
--enable-adaptive-dispatch-to-encoder --enable-pdmux --pdmux-config-path --sm-group-num --custom-weight-loader
--weight-loader-disable-mmap --weight-loader-prefetch-checkpoints --weight-loader-prefetch-num-threads
--weight-loader-drop-cache-after-load --remote-instance-weight-loader-seed-instance-ip
--remote-instance-weight-loader-seed-instance-service-port --remote-instance-weight-loader-send-weights-group-ports
--remote-instance-weight-loader-backend --remote-instance-weight-loader-start-seed-via-transfer-engine
--engine-info-bootstrap-port --modelexpress-config --download-dir --model-checksum --delete-ckpt-after-loading
--decrypted-config-file --decrypted-draft-config-file --checkpoint-engine-wait-weights-before-ready
--enable-prefill-delayer --prefill-delayer-max-delay-passes --prefill-delayer-token-usage-low-watermark
--prefill-delayer-forward-passes-buckets --prefill-delayer-wait-seconds-buckets --prefill-delayer-queue-min-ratio
--prefill-delayer-max-delay-ms --min-free-slots-delay --enable-deterministic-inference --rl-on-policy-target
--kv-canary --kv-canary-real-data --kv-canary-sweep-interval --enable-dynamic-batch-tokenizer
--dynamic-batch-tokenizer-batch-size --dynamic-batch-tokenizer-batch-timeout --enable-tokenizer-batch-encode
--disable-tokenizer-batch-decode --debug-tensor-dump-output-folder --debug-tensor-dump-layers
--debug-tensor-dump-input-file --enable-memory-saver --enable-weights-cpu-backup --enable-draft-weights-cpu-backup
--enable-custom-logit-processor --enable-return-hidden-states --return-hidden-states-mode
--enable-return-routed-experts --enable-return-indexer-topk --disable-outlines-disk-cache --enable-mis
--weight-cache-mode --weight-cache-socket --weight-cache-timeout --forward-hooks --msprobe-dump-config
"""))

# vLLM prints no dump of every argument (≤ 0.9 printed `args: Namespace(…)`), so its list is shorter, in three groups:
# the keys of `non-default args: {…}` in the vLLM 0.10–0.26 logs of tests/fixtures/ and examples/ (`model_tag`, the
# positional model, left out); the fields of the vLLM 0.26 engine configuration line of tests/fixtures/vllm-0.26-h200/
# that are engine arguments under their own names (not `max_seq_len`, which --max-model-len sets, nor `device_config`,
# `quantization_config` and the like, which the engine builds); and a few common flags the captured logs happen not to
# set, each an `add_argument` of vllm/engine/arg_utils.py (read in an earlier release: the least sure group). A
# boolean flag of vLLM is also taken as `--no-…` (argparse's BooleanOptionalAction).
VLLM = KnownFlags("0.26", _names("""
--chat-template --default-chat-template-kwargs --disable-custom-all-reduce --distributed-executor-backend --dtype
--enable-auto-tool-choice --enable-chunked-prefill --enable-prefix-caching --enforce-eager --gpu-memory-utilization
--host --kv-cache-dtype --language-model-only --limit-mm-per-prompt --long-prefill-token-threshold --max-model-len
--max-num-batched-tokens --max-num-seqs --model --override-generation-config --pipeline-parallel-size --port
--quantization --reasoning-parser --served-model-name --speculative-config --tensor-parallel-size --tool-call-parser
--trust-remote-code

--tokenizer --skip-tokenizer-init --tokenizer-mode --revision --tokenizer-revision --download-dir --load-format
--data-parallel-size --decode-context-parallel-size --seed --compilation-config --structured-outputs-config

--api-key --block-size --cpu-offload-gb --generation-config --kv-transfer-config --enable-sleep-mode
--calculate-kv-scales --otlp-traces-endpoint --collect-detailed-traces
"""), negatable=True)
