// Whether this build is instrumented by ASan or TSan (CI's .ci/reliability.sh builds:
// clang with ASan + UBSan, and TSan). A few tests take smaller shapes there: every
// memory access is checked, so their largest problems cost 10-100x the time while
// running the same code paths (tiles, tails, key splits, pages) as the smaller ones.
// The normal build (ctest) runs the full shapes.
#pragma once

namespace flash::test {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)  // gcc
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)  // clang
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace flash::test
