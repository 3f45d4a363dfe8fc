// The bulk data channel (core/rpc/bulk_channel.h) on loopback: frames whose numeric bytes go
// on the socket decode to the same steps as frames carrying every byte inline; hostile peers
// on the data port (random bytes, a wrong or reused token, a truncated handshake, silence, a
// flood of connections) are refused or timed out and the listener keeps serving; a frame
// header naming more bytes than the credit is refused before anything is received; a socket
// that ends mid-frame fails the frame (UNAVAILABLE), never hangs.
#include "core/rpc/bulk_channel.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "core/util/status_macros.h"
#include "gtest/gtest.h"
#include "tests/seeded_rng.h"
#include "tests/worker/step_frame_test_util.h"

namespace sluice {
namespace {

// Polls `done` every 5 ms for up to `limit` (bounds every wait on the listener's thread).
template <typename F>
bool Eventually(F done, absl::Duration limit = absl::Seconds(20)) {
  const absl::Time end = absl::Now() + limit;
  while (!done()) {
    if (absl::Now() > end) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

// A raw client socket connected to 127.0.0.1:port.
UniqueFd Dial(int port) {
  UniqueFd s(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(s.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  timeval tv{10, 0};  // a read the listener should answer at once; bounded anyway
  setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return s;
}

// Whether the listener closed `s` without accepting: a read sees the end (or a reset, when
// the listener left bytes unread), not the 0x01, and not the read timeout.
bool ClosedByListener(int s) {
  char c = 0;
  const ssize_t n = recv(s, &c, 1, 0);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

void SendAll(int s, const std::string& bytes) {
  ASSERT_EQ(send(s, bytes.data(), bytes.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(bytes.size()));
}

std::unique_ptr<BulkListener> Listen(absl::Duration handshake_timeout = absl::Seconds(5),
                                     size_t max_handshakes = 64,
                                     const std::string& congestion_control = "") {
  absl::StatusOr<std::unique_ptr<BulkListener>> l = BulkListener::Create(
      {.host = "127.0.0.1", .handshake_timeout = handshake_timeout,
       .max_handshakes = max_handshakes, .congestion_control = congestion_control});
  EXPECT_TRUE(l.ok()) << l.status();
  return l.ok() ? *std::move(l) : nullptr;
}

// A connected sender and receiver through `listener`, as a stream sets them up.
struct Channel {
  std::unique_ptr<BulkReceiver> receiver;
  std::unique_ptr<BulkSender> sender;
};
// A receiver connected through `listener`, and the worker's end of its socket, raw (a test
// writes what a worker, honest or not, would); a null receiver (with a failure) when not.
struct RawChannel {
  std::unique_ptr<BulkReceiver> receiver;
  UniqueFd worker;
};
RawChannel ConnectRaw(BulkListener* listener,
                      absl::Duration receive_timeout = absl::Seconds(20)) {
  RawChannel c;
  const std::string token = listener->Offer();
  absl::StatusOr<std::unique_ptr<BulkReceiver>> r = BulkReceiver::Connect(
      "127.0.0.1:1", static_cast<uint32_t>(listener->port()), token, absl::Seconds(10),
      receive_timeout);
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return c;
  absl::StatusOr<UniqueFd> fd = listener->Take(token);
  EXPECT_TRUE(fd.ok()) << fd.status();
  if (!fd.ok()) return c;
  c.receiver = *std::move(r);
  c.worker = *std::move(fd);
  return c;
}

Channel Connect(BulkListener* listener, size_t min_bytes = 0, uint64_t cut_after = 0,
                bool inband_headers = false) {
  Channel c;
  RawChannel raw = ConnectRaw(listener);
  if (raw.receiver == nullptr) return c;
  c.receiver = std::move(raw.receiver);
  absl::StatusOr<std::unique_ptr<BulkSender>> sender =
      BulkSender::Create("a test channel", std::move(raw.worker), nullptr, absl::Seconds(20),
                         min_bytes, BulkSenderFaults{.cut_after_bytes = cut_after},
                         inband_headers);
  EXPECT_TRUE(sender.ok()) << sender.status();
  if (sender.ok()) c.sender = *std::move(sender);
  return c;
}

// A listener and a channel through it, with an encoder whose frames' numeric bytes go to its
// sender and a decoder that receives them from its receiver, as a stream and its consumer set
// them up; null (with a failure) when the channel could not be made.
struct WiredChannel {
  std::unique_ptr<BulkListener> listener;
  Channel c;
  StepFrameEncoder encoder;
  StepFrameDecoder decoder{nullptr, nullptr};
};
std::unique_ptr<WiredChannel> Wire(uint64_t cut_after = 0) {
  auto w = std::make_unique<WiredChannel>();
  w->listener = Listen();
  if (w->listener == nullptr) return nullptr;
  w->c = Connect(w->listener.get(), 0, cut_after);
  if (w->c.sender == nullptr) return nullptr;
  w->encoder.set_bulk_payload(w->c.sender.get());
  w->decoder.set_bulk_payload(w->c.receiver.get());
  return w;
}

// Steps mixing what a frame carries: numeric tensors above and below the zero-copy size (their
// offsets padded to 64 bytes), strings (always inline), an empty tensor.
StepFrame MixedFrame(uint64_t seed, int steps) {
  SeededRng rng(seed);
  StepFrame f;
  for (int s = 0; s < steps; ++s) {
    WireStep w;
    w.task_step = s;
    w.num_real_pieces = 2;
    for (int p = 0; p < 2; ++p) {
      Tensor big = Tensor::Allocate(DType::kFloat32, Shape({rng.In(1, 300), 257}));
      for (int64_t i = 0; i < big.num_elements(); ++i) {
        big.mutable_data<float>()[i] = static_cast<float>(rng.In(-1000, 1000)) / 7;
      }
      Tensor small = Tensor::Allocate(DType::kInt16, Shape({rng.In(1, 33)}));
      for (int64_t i = 0; i < small.num_elements(); ++i) {
        small.mutable_data<int16_t>()[i] = static_cast<int16_t>(rng.In(-30000, 30000));
      }
      Tensor words = Tensor::Allocate(DType::kString, Shape({3}));
      for (int i = 0; i < 3; ++i) {
        *words.mutable_string(i) = std::string(static_cast<size_t>(rng.In(0, 9)), 'a' + i);
      }
      w.pieces.push_back({big, small, words, Tensor::Allocate(DType::kInt32, Shape({0, 4}))});
    }
    f.steps.push_back(std::move(w));
  }
  return f;
}

TEST(BulkChannelTest, FramesOverTheSocketDecodeToTheSameStepsAsInline) {
  constexpr uint64_t kSeed = 2028;
  std::cout << "seed " << kSeed << std::endl;
  std::unique_ptr<BulkListener> listener = Listen();
  ASSERT_NE(listener, nullptr);
  Channel c = Connect(listener.get());
  ASSERT_NE(c.sender, nullptr);
  StepFrameEncoder bulk_encoder, inline_encoder;
  bulk_encoder.set_bulk_payload(c.sender.get());
  StepFrameDecoder bulk_decoder(nullptr, nullptr), inline_decoder(nullptr, nullptr);
  bulk_decoder.set_bulk_payload(c.receiver.get());
  for (int i = 0; i < 20; ++i) {
    const StepFrame frame = MixedFrame(kSeed + i, 1 + i % 4);
    grpc::ByteBuffer on_bulk, on_grpc;
    ASSERT_TRUE(bulk_encoder.Encode(frame, &on_bulk).ok());
    ASSERT_TRUE(inline_encoder.Encode(frame, &on_grpc).ok());
    // The bulk frame's gRPC message holds the header and the strings only.
    EXPECT_LT(on_bulk.Length(), on_grpc.Length()) << "frame " << i;
    StepFrame a, b;
    ASSERT_TRUE(bulk_decoder.Decode(on_bulk, &a).ok()) << "frame " << i;
    ASSERT_TRUE(inline_decoder.Decode(on_grpc, &b).ok()) << "frame " << i;
    ExpectSameFrame(a, b);
    ExpectSameFrame(a, frame);
  }
  EXPECT_EQ(bulk_decoder.stats().bulk_frames, 20u);
  EXPECT_EQ(bulk_decoder.stats().bulk_bytes, c.receiver->bytes_received());
  // The sender counts a write when sendmsg returns, which can be after the receiver has the
  // bytes (its thread preempted in between: 1 in ~10 under load): wait for the count, bounded.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (c.sender->bytes_sent() < c.receiver->bytes_received() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(c.sender->bytes_sent(), c.receiver->bytes_received());
}

// One frame of `bytes` uint8 bytes (step `step`).
StepFrame BytesFrame(int64_t step, size_t bytes) {
  StepFrame f;
  WireStep w;
  w.task_step = step;
  w.num_real_pieces = 1;
  w.pieces.push_back({Tensor::Allocate(DType::kUInt8, Shape({static_cast<int64_t>(bytes)}))});
  f.steps.push_back(std::move(w));
  return f;
}

// NotifyWhenNoneWaiting (what a stream's opportunistic coalescing waits on): false with no
// frame waiting; with a frame waiting behind one the unread socket holds, true, and the
// wake-up runs once the sender starts on the waiting frame, which is when the consumer has
// read the first; a sender that fails runs a waiter too (a stream never waits forever).
TEST(BulkChannelTest, TheSenderWakesAWaiterWhenItStartsOnItsLastWaitingFrame) {
  std::unique_ptr<WiredChannel> w = Wire();
  ASSERT_NE(w, nullptr);
  Channel& c = w->c;
  StepFrameEncoder& encoder = w->encoder;
  StepFrameDecoder& decoder = w->decoder;
  EXPECT_FALSE(c.sender->NotifyWhenNoneWaiting([] {})) << "nothing taken, nothing waits";
  // 32 MiB the consumer does not read yet: the sender is held writing it.
  grpc::ByteBuffer big, small;
  ASSERT_TRUE(encoder.Encode(BytesFrame(0, size_t{32} << 20), &big).ok());
  ASSERT_TRUE(Eventually([&] { return !c.sender->has_waiting_frames(); }));  // it started
  ASSERT_TRUE(encoder.Encode(BytesFrame(1, 4096), &small).ok());
  EXPECT_TRUE(c.sender->has_waiting_frames());
  std::atomic<int> woken{0};
  ASSERT_TRUE(c.sender->NotifyWhenNoneWaiting([&] { woken.fetch_add(1); }));
  // A later registration replaces the first: one wake-up in all.
  ASSERT_TRUE(c.sender->NotifyWhenNoneWaiting([&] { woken.fetch_add(1); }));
  EXPECT_EQ(woken.load(), 0) << "woken while the frame still waited";
  StepFrame out;
  ASSERT_TRUE(decoder.Decode(big, &out).ok());
  ASSERT_TRUE(Eventually([&] { return woken.load() > 0; }));
  ASSERT_TRUE(decoder.Decode(small, &out).ok());
  EXPECT_EQ(out.steps[0].task_step, 1);
  EXPECT_EQ(woken.load(), 1);
  EXPECT_FALSE(c.sender->NotifyWhenNoneWaiting([] {}));

  // The consumer leaves with a frame waiting: the failed write wakes the waiter.
  ASSERT_TRUE(encoder.Encode(BytesFrame(2, size_t{32} << 20), &big).ok());
  ASSERT_TRUE(Eventually([&] { return !c.sender->has_waiting_frames(); }));
  ASSERT_TRUE(encoder.Encode(BytesFrame(3, 4096), &small).ok());
  std::atomic<bool> failed_woken{false};
  ASSERT_TRUE(c.sender->NotifyWhenNoneWaiting([&] { failed_woken = true; }));
  c.receiver.reset();  // closes the consumer's socket
  EXPECT_TRUE(Eventually([&] { return failed_woken.load(); }));
}

TEST(BulkChannelTest, SmallFramesStayInline) {
  std::unique_ptr<BulkListener> listener = Listen();
  ASSERT_NE(listener, nullptr);
  Channel c = Connect(listener.get(), /*min_bytes=*/size_t{1} << 30);
  ASSERT_NE(c.sender, nullptr);
  StepFrameEncoder encoder;
  encoder.set_bulk_payload(c.sender.get());
  StepFrameDecoder decoder(nullptr, nullptr);  // no source: a bulk frame would be DATA_LOSS
  const StepFrame frame = MixedFrame(7, 2);
  grpc::ByteBuffer bb;
  ASSERT_TRUE(encoder.Encode(frame, &bb).ok());
  StepFrame out;
  ASSERT_TRUE(decoder.Decode(bb, &out).ok());
  ExpectSameFrame(out, frame);
  EXPECT_EQ(c.sender->bytes_sent(), 0u);
}

TEST(BulkChannelTest, HostilePeersAreRefusedAndTheListenerKeepsServing) {
  constexpr uint64_t kSeed = 4242;
  std::cout << "seed " << kSeed << std::endl;
  std::unique_ptr<BulkListener> listener = Listen(absl::Milliseconds(300));
  ASSERT_NE(listener, nullptr);
  const std::string token = listener->Offer();
  SeededRng rng(kSeed);
  int expected_refused = 0;
  // Random bytes (never the magic: its first byte differs).
  for (int i = 0; i < 10; ++i) {
    UniqueFd s = Dial(listener->port());
    std::string junk(static_cast<size_t>(rng.In(1, 4096)), '\0');
    for (char& ch : junk) ch = static_cast<char>(rng.In(0, 255));
    junk[0] = 'X';
    SendAll(s.get(), junk);
    EXPECT_TRUE(ClosedByListener(s.get())) << "junk " << i;
    ++expected_refused;
  }
  // The magic and a wrong token.
  {
    UniqueFd s = Dial(listener->port());
    std::string wrong = token;
    wrong[5] ^= 1;
    SendAll(s.get(), absl::StrCat("SLB1", wrong));
    EXPECT_TRUE(ClosedByListener(s.get()));
    ++expected_refused;
  }
  // A truncated handshake: half the token, then the peer goes away.
  {
    UniqueFd s = Dial(listener->port());
    SendAll(s.get(), absl::StrCat("SLB1", token.substr(0, 10)));
    shutdown(s.get(), SHUT_WR);
    EXPECT_TRUE(ClosedByListener(s.get()));
    ++expected_refused;
  }
  // Slow loris: half the token and then nothing; closed at the handshake timeout.
  {
    UniqueFd s = Dial(listener->port());
    SendAll(s.get(), absl::StrCat("SLB1", token.substr(0, 10)));
    EXPECT_TRUE(ClosedByListener(s.get()));
  }
  ASSERT_TRUE(Eventually([&] { return listener->stats().timed_out == 1; }));
  ASSERT_TRUE(Eventually(
      [&] { return listener->stats().refused == static_cast<uint64_t>(expected_refused); }));
  // The token is still good for its stream's consumer, once.
  absl::StatusOr<std::unique_ptr<BulkReceiver>> good = BulkReceiver::Connect(
      "ipv4:127.0.0.1:9", static_cast<uint32_t>(listener->port()), token, absl::Seconds(10),
      absl::Seconds(10));
  ASSERT_TRUE(good.ok()) << good.status();
  // A second connection with the same token (a replay) is refused.
  {
    UniqueFd s = Dial(listener->port());
    SendAll(s.get(), absl::StrCat("SLB1", token));
    EXPECT_TRUE(ClosedByListener(s.get()));
  }
  EXPECT_TRUE(listener->Take(token).ok());
  EXPECT_EQ(listener->Take(token).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(listener->stats().accepted, 1u);
  // A receiver presenting an unknown token gets ABORTED, not a socket.
  absl::StatusOr<std::unique_ptr<BulkReceiver>> stranger = BulkReceiver::Connect(
      "127.0.0.1:9", static_cast<uint32_t>(listener->port()), std::string(kBulkTokenBytes, 'z'),
      absl::Seconds(10), absl::Seconds(10));
  EXPECT_EQ(stranger.status().code(), absl::StatusCode::kAborted);
}

TEST(BulkChannelTest, AFloodOfSilentConnectionsIsBoundedAndTimesOut) {
  std::unique_ptr<BulkListener> listener = Listen(absl::Milliseconds(300), /*max_handshakes=*/4);
  ASSERT_NE(listener, nullptr);
  std::vector<UniqueFd> flood;
  for (int i = 0; i < 12; ++i) flood.push_back(Dial(listener->port()));
  // Beyond 4 in their handshake, connections are closed at accept; the 4 time out.
  ASSERT_TRUE(Eventually([&] {
    const BulkListener::Stats s = listener->stats();
    return s.overloaded + s.timed_out == 12;
  }));
  EXPECT_GE(listener->stats().overloaded, 8u);
  // And then it serves.
  const std::string token = listener->Offer();
  absl::StatusOr<std::unique_ptr<BulkReceiver>> good = BulkReceiver::Connect(
      "127.0.0.1:9", static_cast<uint32_t>(listener->port()), token, absl::Seconds(10),
      absl::Seconds(10));
  EXPECT_TRUE(good.ok()) << good.status();
}

TEST(BulkChannelTest, AHeaderBeyondTheCreditIsRefusedBeforeReceiving) {
  std::unique_ptr<WiredChannel> w = Wire();
  ASSERT_NE(w, nullptr);
  Channel& c = w->c;
  const StepFrame frame = MixedFrame(11, 3);
  grpc::ByteBuffer bb;
  ASSERT_TRUE(w->encoder.Encode(frame, &bb).ok());
  StepFrame out;
  absl::Status s = w->decoder.Decode(bb, &out, FrameCreditLimit{.credit = 1000});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ(c.receiver->bytes_received(), 0u);
  // A header whose bulk size disagrees with its tensors (a hostile length): refused too.
  std::string bytes = Flatten(bb);
  proto::StepFrameHeader header;
  uint32_t len = 0;
  std::memcpy(&len, bytes.data(), 4);
  ASSERT_TRUE(header.ParseFromArray(bytes.data() + 4, static_cast<int>(len)));
  header.mutable_bulk_payload()->set_bytes(uint64_t{1} << 62);
  std::string forged;
  const std::string h = header.SerializeAsString();
  const uint32_t hl = static_cast<uint32_t>(h.size());
  forged.append(reinterpret_cast<const char*>(&hl), 4);
  forged += h;
  forged += bytes.substr(4 + len);
  s = w->decoder.Decode(FromString(forged), &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ(c.receiver->bytes_received(), 0u);
}

TEST(BulkChannelTest, ASocketCutMidFrameFailsTheFrameUnavailable) {
  std::unique_ptr<BulkListener> listener = Listen();
  ASSERT_NE(listener, nullptr);
  Channel c = Connect(listener.get(), 0, /*cut_after=*/1000000);
  ASSERT_NE(c.sender, nullptr);
  StepFrameEncoder encoder;
  encoder.set_bulk_payload(c.sender.get());
  StepFrameDecoder decoder(nullptr, nullptr);
  decoder.set_bulk_payload(c.receiver.get());
  absl::Status last;
  int decoded = 0;
  for (int i = 0; i < 50 && last.ok(); ++i) {
    grpc::ByteBuffer bb;
    ASSERT_TRUE(encoder.Encode(MixedFrame(100 + i, 2), &bb).ok());
    StepFrame out;
    last = decoder.Decode(bb, &out);
    if (last.ok()) ++decoded;
  }
  EXPECT_EQ(last.code(), absl::StatusCode::kUnavailable) << last;
  EXPECT_NE(last.message().find("the socket ended"), absl::string_view::npos) << last;
  EXPECT_LE(c.receiver->bytes_received(), 1000000u);
  EXPECT_GT(decoded, 0);
}

TEST(BulkChannelTest, AbortEndsAReceiveInProgress) {
  std::unique_ptr<BulkListener> listener = Listen();
  ASSERT_NE(listener, nullptr);
  Channel c = Connect(listener.get());
  ASSERT_NE(c.receiver, nullptr);
  absl::Notification done;
  absl::Status status;
  std::thread reader([&] {
    status = c.receiver->Receive(4096, nullptr).status();  // nothing is ever sent
    done.Notify();
  });
  absl::SleepFor(absl::Milliseconds(50));
  c.receiver->Abort();
  EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(20)));
  reader.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
}

// In-band headers (BulkAccept.inband_headers): every frame goes on the socket, the small ones
// with their bytes inline, the large ones followed by their numeric bytes; the consumer reads
// each frame's length and bytes and decodes it to the steps sent, in order, and the socket's
// end after the last frame is a clean end (OUT_OF_RANGE), not a broken frame.
TEST(BulkChannelTest, InbandFramesDecodeToTheStepsSentAndTheSocketEndsBetweenFrames) {
  constexpr uint64_t kSeed = 2029;
  std::cout << "seed " << kSeed << std::endl;
  std::unique_ptr<BulkListener> listener = Listen();
  ASSERT_NE(listener, nullptr);
  Channel c = Connect(listener.get(), /*min_bytes=*/4096, 0, /*inband_headers=*/true);
  ASSERT_NE(c.sender, nullptr);
  StepFrameEncoder encoder;
  encoder.set_bulk_payload(c.sender.get());
  StepFrameDecoder decoder(nullptr, nullptr);
  decoder.set_bulk_payload(c.receiver.get());
  std::vector<StepFrame> sent;
  for (int i = 0; i < 24; ++i) {
    // Every third frame is under min_bytes: its bytes stay in the frame, on the socket too.
    // Every fourth else has no step: 4 bytes, which a received slice holds inline; the last
    // is the end of the task.
    sent.push_back(i % 3 == 2 ? BytesFrame(i, 100)
                   : i % 4 == 3 ? StepFrame{}
                                : MixedFrame(kSeed + i, 1 + i % 4));
    sent.back().end_of_task = i == 23;
    grpc::ByteBuffer bb;
    ASSERT_TRUE(encoder.Encode(sent.back(), &bb).ok());
    ASSERT_TRUE(c.sender->SendFrame(bb)) << "frame " << i;
  }
  const std::function<bool()> never = [] { return false; };
  for (size_t i = 0; i < sent.size(); ++i) {
    grpc::ByteBuffer bb;
    absl::Status s = c.receiver->ReceiveFrame(size_t{64} << 20, never, &bb);
    ASSERT_TRUE(s.ok()) << "frame " << i << ": " << s;
    StepFrame out;
    s = decoder.Decode(bb, &out);
    ASSERT_TRUE(s.ok()) << "frame " << i << ": " << s;
    ExpectSameFrame(out, sent[i]);
  }
  EXPECT_EQ(decoder.stats().bulk_frames, 12u);  // the frames over min_bytes
  // Every byte read: the sender has nothing left, and its end is the socket's end.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (c.sender->bytes_sent() < c.receiver->bytes_received() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  c.sender.reset();
  grpc::ByteBuffer after;
  absl::Status end = c.receiver->ReceiveFrame(size_t{64} << 20, never, &after);
  EXPECT_EQ(end.code(), absl::StatusCode::kOutOfRange) << end;
}

// The worker's frame `frame` as an honest worker writes it on a socket with in-band headers:
// [length][the frame's bytes][its numeric tensors at 64-byte aligned offsets]. Written here
// from the encoder's hand-over, not by a BulkSender, so that a test can cut or change it.
class CapturingSink final : public BulkPayloadSink {
 public:
  bool Take(absl::Span<const Tensor* const> tensors, absl::Span<const size_t> at,
            size_t extent) override {
    payload_.assign(extent, '\0');
    for (size_t i = 0; i < tensors.size(); ++i) {
      std::memcpy(payload_.data() + at[i], tensors[i]->raw_data(), tensors[i]->byte_size());
    }
    return true;
  }
  std::string payload_;
};
std::string InbandBytes(const StepFrame& frame) {
  CapturingSink sink;
  StepFrameEncoder encoder;
  encoder.set_bulk_payload(&sink);
  grpc::ByteBuffer bb;
  EXPECT_TRUE(encoder.Encode(frame, &bb).ok());
  const std::string header = Flatten(bb);
  const uint32_t n = static_cast<uint32_t>(header.size());
  std::string bytes;
  for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return bytes + header + sink.payload_;
}

// What a consumer makes of `bytes` on its socket, the worker's end then closed: the status of
// ReceiveFrame, else of decoding the frame it brought (within `credit`).
absl::Status ConsumeInband(BulkListener* listener, const std::string& bytes, size_t max_bytes,
                           int64_t credit = std::numeric_limits<int64_t>::max()) {
  RawChannel c = ConnectRaw(listener, absl::Seconds(10));
  if (c.receiver == nullptr) return absl::InternalError("no channel");
  if (!bytes.empty() && send(c.worker.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL) !=
                            static_cast<ssize_t>(bytes.size())) {
    return absl::InternalError("the test's send failed");
  }
  shutdown(c.worker.get(), SHUT_WR);
  grpc::ByteBuffer bb;
  RETURN_IF_ERROR(c.receiver->ReceiveFrame(max_bytes, [] { return false; }, &bb));
  StepFrameDecoder decoder(nullptr, nullptr);
  decoder.set_bulk_payload(c.receiver.get());
  StepFrame out;
  return decoder.Decode(bb, &out, FrameCreditLimit{.credit = credit});
}

// A frame's length is checked before anything is allocated or read for it: 0, or beyond the
// consumer's cap, is DATA_LOSS naming the length (not a wait for bytes that never come).
TEST(BulkChannelTest, AnInbandLengthOfZeroOrBeyondTheCapIsRefusedBeforeReading) {
  std::unique_ptr<BulkListener> listener = Listen();
  ASSERT_NE(listener, nullptr);
  const auto length = [](uint32_t n) {
    return std::string{static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
                       static_cast<char>((n >> 16) & 0xff), static_cast<char>(n >> 24)};
  };
  for (uint32_t n : {0u, 4097u, 0xffffffffu}) {
    // The bytes that follow would make a frame of any length short: only the check refuses.
    absl::Status s = ConsumeInband(listener.get(), length(n) + std::string(64, 'x'), 4096);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << n << ": " << s;
    EXPECT_NE(s.message().find(absl::StrCat("a frame of ", n, " bytes")), absl::string_view::npos)
        << s;
  }
}

// A socket that ends anywhere in a frame fails it (UNAVAILABLE: the call is made again), at
// every byte: in its length, its header, its payload; only its end before the first byte is
// the socket's clean end (OUT_OF_RANGE), and only the whole frame decodes.
TEST(BulkChannelTest, AnInbandFrameCutAtAnyByteFailsUnavailable) {
  std::unique_ptr<BulkListener> listener = Listen();
  ASSERT_NE(listener, nullptr);
  const std::string bytes = InbandBytes(BytesFrame(7, 300));
  const size_t header_end = 4 + (size_t{static_cast<unsigned char>(bytes[0])} |
                                 size_t{static_cast<unsigned char>(bytes[1])} << 8);
  ASSERT_LT(header_end, bytes.size());  // a payload follows the header
  for (size_t k = 0; k <= bytes.size(); ++k) {
    const absl::Status s = ConsumeInband(listener.get(), bytes.substr(0, k), 4096);
    if (k == 0) {
      EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
    } else if (k == bytes.size()) {
      EXPECT_TRUE(s.ok()) << s;
    } else {
      ASSERT_EQ(s.code(), absl::StatusCode::kUnavailable) << "cut at " << k << ": " << s;
      EXPECT_NE(s.message().find(k < header_end ? "of a frame" : "of a frame's"),
                absl::string_view::npos)
          << s;
    }
  }
}

// Hostile in-band frames: random lengths, headers with random bytes changed, counts that
// disagree with the bytes that follow, cut anywhere. Each ends in a clear status, never a
// crash or a hang: DATA_LOSS or INVALID_ARGUMENT (the decoder's) for what the frame says,
// UNAVAILABLE for a socket that ends first, OK only when what it says holds.
TEST(BulkChannelTest, HostileInbandFramesFailCleanly) {
  constexpr uint64_t kSeed = 2030;
  std::cout << "seed " << kSeed << std::endl;
  SeededRng rng(kSeed);
  std::unique_ptr<BulkListener> listener = Listen();
  ASSERT_NE(listener, nullptr);
  const std::string honest = InbandBytes(MixedFrame(kSeed, 2));
  int ok = 0, refused = 0, unavailable = 0;
  for (int i = 0; i < 150; ++i) {
    std::string bytes = honest;
    switch (i % 3) {
      case 0:  // a random length
        for (int b = 0; b < 4; ++b) bytes[b] = static_cast<char>(rng.In(0, 255));
        break;
      case 1:  // random bytes of the header changed
        for (int n = rng.In(1, 4); n > 0; --n) {
          bytes[4 + rng.In(0, 40)] = static_cast<char>(rng.In(0, 255));
        }
        break;
      case 2:  // the payload's bytes, more or fewer than the header says
        bytes.resize(bytes.size() + rng.In(0, 256) - 128);
        break;
    }
    if (rng.In(0, 3) == 0) bytes.resize(rng.In(0, static_cast<int64_t>(bytes.size())));
    const absl::Status s = ConsumeInband(listener.get(), bytes, size_t{16} << 20,
                                         /*credit=*/int64_t{4} << 20);
    switch (s.code()) {
      case absl::StatusCode::kOk: ++ok; break;
      case absl::StatusCode::kDataLoss:
      case absl::StatusCode::kInvalidArgument: ++refused; break;
      case absl::StatusCode::kUnavailable: ++unavailable; break;
      case absl::StatusCode::kOutOfRange: EXPECT_TRUE(bytes.empty()) << i; break;
      default: ADD_FAILURE() << "frame " << i << ": " << s;
    }
  }
  std::cout << "ok " << ok << ", refused " << refused << ", unavailable " << unavailable
            << std::endl;
  EXPECT_GT(refused, 0);
  EXPECT_GT(unavailable, 0);
}

// Between frames a silent socket is a slow pipeline, not a failure: each receive timeout asks
// give_up, and the wait ends (UNAVAILABLE) only once it says so (the call has ended).
TEST(BulkChannelTest, BetweenInbandFramesOnlyGiveUpEndsTheWait) {
  std::unique_ptr<BulkListener> listener = Listen();
  ASSERT_NE(listener, nullptr);
  RawChannel c = ConnectRaw(listener.get(), absl::Milliseconds(20));
  ASSERT_NE(c.receiver, nullptr);
  int asked = 0;
  grpc::ByteBuffer bb;
  absl::Status s = c.receiver->ReceiveFrame(4096, [&] { return ++asked == 4; }, &bb);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_EQ(asked, 4);
}

TEST(BulkChannelTest, HostOfWorkerAddresses) {
  EXPECT_EQ(*BulkHostOf("127.0.0.1:5000"), "127.0.0.1");
  EXPECT_EQ(*BulkHostOf("ipv4:10.0.0.2:5000"), "10.0.0.2");
  EXPECT_EQ(*BulkHostOf("[::1]:5000"), "::1");
  EXPECT_EQ(*BulkHostOf("dns:///worker-0.svc:5000"), "worker-0.svc");
  EXPECT_FALSE(BulkHostOf(":5000").ok());
  EXPECT_FALSE(BulkHostOf("[::1:5000").ok());
}

// The congestion control of a socket (TCP_CONGESTION).
std::string CongestionControlOf(int fd) {
  char name[32] = {};
  socklen_t len = sizeof(name);
  EXPECT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len), 0) << std::strerror(errno);
  return std::string(name, strnlen(name, sizeof(name)));
}

// The worker's end of a bulk socket (the sending one, whose congestion control paces the
// frames) uses the algorithm the listener was given, not the host's default; a name the
// kernel does not have is refused up front, naming it.
TEST(BulkListenerTest, AcceptedSocketsUseTheCongestionControlAsked) {
  UniqueFd probe(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const std::string host_default = CongestionControlOf(probe.get());
  // reno is always built in; cubic where the default is reno.
  const std::string asked = host_default == "reno" ? "cubic" : "reno";
  if (!CheckBulkCongestionControl(asked).ok()) {
    GTEST_SKIP() << asked << " cannot be set here (default " << host_default << ")";
  }
  std::unique_ptr<BulkListener> listener = Listen(absl::Seconds(5), 64, asked);
  ASSERT_NE(listener, nullptr);
  const std::string token = listener->Offer();
  absl::StatusOr<std::unique_ptr<BulkReceiver>> r = BulkReceiver::Connect(
      "127.0.0.1:1", static_cast<uint32_t>(listener->port()), token, absl::Seconds(10),
      absl::Seconds(20));
  ASSERT_TRUE(r.ok()) << r.status();
  absl::StatusOr<UniqueFd> fd = listener->Take(token);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(CongestionControlOf(fd->get()), asked) << "host default: " << host_default;

  EXPECT_TRUE(CheckBulkCongestionControl("").ok());
  const absl::Status bad = CheckBulkCongestionControl("no-such-algorithm");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
  EXPECT_NE(bad.message().find("no-such-algorithm"), absl::string_view::npos) << bad;
  absl::StatusOr<std::unique_ptr<BulkListener>> refused = BulkListener::Create(
      {.host = "127.0.0.1", .congestion_control = "no-such-algorithm"});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
}

}  // namespace
}  // namespace sluice
