/* Transport contracts between the pieces: agent -> collector (unix socket), collector -> Kafka
 * (topic, key, value, headers), and the file names the agent writes under FLEETPROF_OUTPUT.
 * Constants only; no code. Changing any of these is a protocol change: bump CM_SOCK_VERSION.
 *
 * Agent -> collector, over a SOCK_STREAM unix socket (path: FLEETPROF_COLLECTOR, default
 * CM_DEFAULT_SOCKET):
 *
 *   1. The agent sends a hello: 8 bytes, "FPRH" magic then u32 LE protocol version.
 *   2. The agent sends messages: u32 LE length N (1 <= N <= CM_SOCK_MAX_MSG) then N bytes, one
 *      chunk frame (see chunk.h) per message.
 *   3. The collector answers every message, in order, with an ack of CM_SOCK_ACK_SIZE bytes:
 *      u32 LE message number on this connection (1, 2, ...) and i32 LE status: 0 when the chunk
 *      is durably accepted (written to the spool or acknowledged by Kafka), a negative CM_E*
 *      code when it was rejected as invalid (the agent must not resend it), or CM_SOCK_RETRY
 *      when the collector is shedding load (the agent keeps the chunk and retries later).
 *   4. The agent keeps each chunk until its ack arrives; on a broken connection it resends the
 *      unacknowledged ones after reconnecting. Duplicates are possible and are removed by chunk
 *      id downstream (at-least-once transport, exactly-once accounting).
 *   5. Commands, collector -> agent: an ack-sized record whose message number is
 *      CM_SOCK_CMD_NO (no message ever has it, so an agent that knows no command ignores the
 *      record) and whose status is the command: CM_SOCK_CMD_CAPTURE starts a manual incident
 *      capture, as fleetprof_capture() does. Written between acks, never inside one.
 *
 * Control client -> collector (`fleetprof capture --collector SOCKET`), on the same socket:
 *   a hello of CM_SOCK_CTL_MAGIC and u32 LE CM_SOCK_VERSION, then ONE message (u32 LE length N,
 *   1 <= N <= CM_SOCK_CTL_MAX_MSG, then N bytes of command text: lines key=value, keys
 *   `cmd` (capture), `service` (required), `host`, `pid`, `reason`, `requester`, `id`); the
 *   collector answers with one ack-sized record: u32 LE 1 and i32 LE the number of connected
 *   agents the command was sent to, or a negative CM_E* code (CM_EFORMAT: not a command;
 *   CM_EINVAL: no service). Then it closes the connection.
 *
 * Control topic (aggregator -> every collector): CM_TOPIC_CONTROL, key = the service, value =
 * the same command text (with `id` and `issued_ns`, unix ns when the aggregator took it).
 *
 * Collector -> Kafka: topic CM_TOPIC_CHUNKS (configurable), key = the chunk's service name
 * (so a service's chunks stay in one partition, in order), value = the chunk frame exactly as
 * the agent sent it (never re-encoded), headers below added by the collector.
 */
#ifndef CM_WIRE_H
#define CM_WIRE_H

#include "cm/chunk.h"

#define CM_DEFAULT_SOCKET "/run/fleetprof/collector.sock"
#define CM_SOCK_HELLO_MAGIC "FPRH"
#define CM_SOCK_HELLO_SIZE 8
#define CM_SOCK_VERSION 1
#define CM_SOCK_MAX_MSG (CM_FRAME_HEADER_SIZE + CM_MAX_RAW_SIZE + CM_MAX_RAW_SIZE / 255 + 16)
#define CM_SOCK_ACK_SIZE 8
#define CM_SOCK_RETRY (-1) /* -EPERM is never a chunk status, so -1 is free for "retry" */
#define CM_SOCK_CMD_NO 0xffffffffu /* message number of a command record */
#define CM_SOCK_CMD_CAPTURE 1      /* command: start a manual incident capture */
#define CM_SOCK_CTL_MAGIC "FPRC"   /* hello of a control client */
#define CM_SOCK_CTL_MAX_MSG 4096u

#define CM_TOPIC_CHUNKS "fleetprof.chunks"
#define CM_TOPIC_DLQ "fleetprof.chunks.dlq"
#define CM_TOPIC_CONTROL "fleetprof.control"

/* Kafka headers set by the collector (all values are UTF-8 text). */
#define CM_HDR_HOST "fp-host"             /* node host name */
#define CM_HDR_COLLECTOR "fp-collector"   /* collector instance id */
#define CM_HDR_NODE "fp-node"             /* Kubernetes node name, if known */
#define CM_HDR_POD "fp-pod"               /* namespace/pod of the sending process, if known */
#define CM_HDR_CONTAINER "fp-container"   /* container id from the peer's cgroup, if known */
#define CM_HDR_PEER_PID "fp-peer-pid"     /* from SO_PEERCRED */
#define CM_HDR_PEER_UID "fp-peer-uid"
#define CM_HDR_PEER_NSPID "fp-peer-nspid" /* the peer's pid in its own pid namespace (NSpid) */
#define CM_HDR_RECEIVED "fp-received-ns"  /* unix ns when the collector accepted the chunk */
/* Header set by the aggregator on dead-lettered messages. */
#define CM_HDR_DLQ_REASON "fp-dlq-reason" /* "EFORMAT: samples[cpu].stack[3]=13 out of range" */

/* Files under FLEETPROF_OUTPUT: one chunk frame per file, written to a temporary name and
 * renamed, so a reader never sees half a file. Name: <service>-<pid>-<sequence, 8 digits>.fpc */
#define CM_CHUNK_FILE_SUFFIX ".fpc"

#endif
