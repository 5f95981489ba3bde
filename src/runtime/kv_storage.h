// Where the KV cache's keys and values live: owned by the model's backend, addressed by slot.
// KvCache keeps the slot arithmetic (blocks, lanes); a backend's storage keeps the numbers in its
// own memory and type, so the engine never knows which device it runs on.
#pragma once
#include <cstdint>
#include <string>

namespace tf {

class KvStorage {
 public:
  virtual ~KvStorage() = default;
  virtual int64_t n_slots() const = 0;
  // Copies one slot's keys and values in every layer (a verified draft row moving from scratch
  // to its lane's position); the bits move unchanged.
  virtual void copy_slot(int32_t from, int32_t to) = 0;
  // The stored form, e.g. "f32 8x1024" (element type, layers x K/V width): saved K/V is only ever
  // put back into storage of the same form.
  virtual std::string format() const = 0;
  // Bytes of n consecutive slots' keys and values in every layer, and their copy to and from host
  // memory (a saved slot's file), the bits unchanged.
  virtual int64_t bytes_for(int64_t n_slots) const = 0;
  virtual void read_slots(int32_t first, int64_t n, uint8_t* out) const = 0;
  virtual void write_slots(int32_t first, int64_t n, const uint8_t* in) = 0;
};

}  // namespace tf
