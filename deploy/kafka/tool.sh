#!/usr/bin/env bash
# Runs a Kafka CLI tool from the cached release (fetching it first if needed), e.g.
#   tool.sh topics --bootstrap-server 127.0.0.1:19092 --list
#   echo hi | tool.sh console-producer --bootstrap-server 127.0.0.1:19092 --topic fleetprof.chunks.dlq
#   tool.sh console-consumer --bootstrap-server 127.0.0.1:19092 --topic fleetprof.chunks.dlq \
#     --from-beginning --max-messages 1
# Aliases: topics, console-producer, console-consumer, consumer-groups, metadata-quorum,
# get-offsets, storage; anything else is taken as a fully qualified main class.
set -euo pipefail
# shellcheck source=SCRIPTDIR/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

[ $# -ge 1 ] || die "usage: tool.sh <alias|main.Class> [args...]"
case "$1" in
  topics) main=org.apache.kafka.tools.TopicCommand ;;
  console-producer) main=org.apache.kafka.tools.ConsoleProducer ;;
  console-consumer) main=org.apache.kafka.tools.consumer.ConsoleConsumer ;;
  consumer-groups) main=org.apache.kafka.tools.consumer.group.ConsumerGroupCommand ;;
  metadata-quorum) main=org.apache.kafka.tools.MetadataQuorumCommand ;;
  get-offsets) main=org.apache.kafka.tools.GetOffsetShell ;;
  storage) main=kafka.tools.StorageTool ;;
  -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) main="$1" ;;
esac
shift
"$KAFKA_DIR/fetch.sh" >/dev/null
KAFKA_TOOL_TIMEOUT="${KAFKA_TOOL_TIMEOUT:-0}" kafka_tool "$main" "$@"
