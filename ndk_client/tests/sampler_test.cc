// Sampler: what the hooks ask it (MaybeSampled inline, then SampleSize) gives exact sizes at
// interval 1 and for large allocations, unbiased byte totals otherwise, and a new session takes
// effect at a thread's very next allocation, whatever the last session left in it; the profiler's
// own allocations, made with the count set aside (HookThread::EnterHook), move nothing of the
// program's stream.
#include <math.h>
#include <stdio.h>

#include "client/sampler.h"
#include "tests/test_util.h"

using droidheap::Sampler;

namespace {

constexpr uint64_t kSeed = 42;

// As heapprofd_entry_points.cc asks.
uint64_t Sample(Sampler* sampler, uint64_t size, uint64_t interval, uint32_t session) {
  if (sampler->session() != session) sampler->Restart();
  if (!sampler->MaybeSampled(size)) return 0;
  return sampler->SampleSize(size, interval, kSeed, session);
}

void TestIntervalOneSamplesEveryByte() {
  Sampler sampler;
  for (uint64_t size = 0; size < 5000; ++size) CHECK(Sample(&sampler, size, 1, 1) == size);
}

void TestLargeAllocationsAreAlwaysSampledAtTheirSize() {
  Sampler sampler;
  for (int i = 0; i < 1000; ++i) {
    CHECK(Sample(&sampler, 4096, 4096, 1) == 4096);
    CHECK(Sample(&sampler, 100000, 4096, 1) == 100000);
  }
}

// Sampled bytes estimate allocated bytes: 10M allocations of 100 bytes at 4096, within 5 sigma
// (each sample stands for 4096 bytes; about 244k samples).
void TestSmallAllocationsAreUnbiased() {
  Sampler sampler;
  const uint64_t count = 10000000, size = 100, interval = 4096;
  uint64_t sampled = 0;
  for (uint64_t i = 0; i < count; ++i) sampled += Sample(&sampler, size, interval, 1);
  const double expected = static_cast<double>(count * size);
  const double sigma = sqrt(expected / interval) * interval;
  printf("sampled %llu of %.0f bytes (sigma %.0f)\n", static_cast<unsigned long long>(sampled),
         expected, sigma);
  CHECK(fabs(static_cast<double>(sampled) - expected) < 5 * sigma);
}

// A thread that sampled at 4096 in session 1 samples every allocation of session 2 at interval 1
// from the first one on, and a third session at a huge interval stops sampling small blocks.
void TestANewSessionTakesEffectAtOnce() {
  Sampler sampler;
  for (int i = 0; i < 1000; ++i) Sample(&sampler, 16, 4096, 1);
  for (uint64_t size = 1; size < 100; ++size) CHECK(Sample(&sampler, size, 1, 2) == size);
  uint64_t sampled = 0;
  for (int i = 0; i < 100000; ++i) sampled += Sample(&sampler, 16, uint64_t{1} << 40, 3);
  CHECK(sampled == 0);
}

// The hooks ask MaybeSampled of every allocation, the profiler's own too, and send those it lets
// through on, where the profiler's go no further: with the count put back afterwards, the
// program's samples are the ones it has without them.
void TestTheProfilersOwnAllocationsTakeNoSamplePoint() {
  Sampler alone, beside;
  for (int i = 0; i < 200000; ++i) {
    const uint64_t size = 16 + (i * 7919) % 2000;
    if (i % 1000 == 999) {  // the profiler records: a few allocations of its own, large and small
      const int64_t held = beside.countdown();
      for (uint64_t own : {24, 5000, 100, 3000, 64}) beside.MaybeSampled(own);
      beside.set_countdown(held);
    }
    CHECK(Sample(&alone, size, 4096, 1) == Sample(&beside, size, 4096, 1));
  }
}

// The intervals' logarithm agrees with libm's over the sampler's whole range of u, (0, 1].
void TestLogAgreesWithLibm() {
  uint64_t state = 88172645463325252ull;
  double worst = 0;
  for (int i = 0; i < 4000000; ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    // Uniform bits, and as many u close to 1 and to 0 (where log is smallest and largest).
    const uint64_t bits = i % 3 == 0 ? state >> 11 : i % 3 == 1 ? ~(state >> 40) : state >> 50;
    const double u = (static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) + 1.0) /
                     9007199254740992.0;
    const double error = fabs(Sampler::Log(u) - log(u)) / fmax(fabs(log(u)), 1e-300);
    if (error > worst) worst = error;
  }
  printf("Log's largest relative error: %.3g\n", worst);
  CHECK(worst < 1e-13);
}

}  // namespace

int main() {
  TestLogAgreesWithLibm();
  TestIntervalOneSamplesEveryByte();
  TestLargeAllocationsAreAlwaysSampledAtTheirSize();
  TestSmallAllocationsAreUnbiased();
  TestANewSessionTakesEffectAtOnce();
  TestTheProfilersOwnAllocationsTakeNoSamplePoint();
  printf("ok\n");
  return 0;
}
