#include "hpdt/nccl_log/lexer.h"

#include <cctype>

namespace hpdt::nccl_log {

const char* level_name(Level l) {
  switch (l) {
    case Level::Info: return "INFO";
    case Level::Warn: return "WARN";
    case Level::Trace: return "TRACE";
    case Level::Call: return "CALL";
    case Level::Version: return "VERSION";
  }
  return "?";
}

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_space(char c) { return c == ' ' || c == '\t'; }
// Characters of a hostname (gethostname() cut at the first '.'; 2.29+ maps others to '-'). Narrower
// than the grammar's [^\s:\[\]] so that a splice inside a message ("via P2P/Cnode-a:…") does not
// glue message text to the host.
bool is_host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '-' || c == '_' || c == '.';
}
bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!is_digit(c)) return false;
  return true;
}
long to_long(std::string_view s) {  // s is all digits; saturates instead of overflowing
  long v = 0;
  for (char c : s) {
    if (v > 100000000000L) return v;
    v = v * 10 + (c - '0');
  }
  return v;
}

// The token that ends at `end` (exclusive), separated by one space from what precedes it.
std::string_view token_before(std::string_view line, size_t end, size_t* start) {
  size_t a = end;
  while (a > 0 && !is_space(line[a - 1])) --a;
  *start = a;
  return line.substr(a, end - a);
}

bool is_file_line(std::string_view t) {  // "misc/ibvwrap.cc:212" or "register_mr_buffers:647"
  size_t colon = t.rfind(':');
  return colon != std::string_view::npos && colon > 0 && all_digits(t.substr(colon + 1));
}

struct Prefix {
  size_t host_start = 0, msg_start = 0;
  Record rec;
};

// Tries to read `host:pid:tid [dev] [loc] NCCL LEVEL ` backwards from `nccl_pos`, the index of the
// space before "NCCL". Fills p and returns true on success.
bool parse_prefix_at(std::string_view line, size_t nccl_pos, Prefix* p) {
  size_t after = nccl_pos + 6;  // past " NCCL "
  std::string_view rest = line.substr(after);
  static constexpr struct { const char* word; Level level; } kLevels[] = {
      {"INFO", Level::Info}, {"WARN", Level::Warn}, {"TRACE", Level::Trace}, {"CALL", Level::Call}};
  bool found = false;
  for (const auto& lv : kLevels) {
    std::string_view w(lv.word);
    if (rest.substr(0, w.size()) == w && (rest.size() == w.size() || rest[w.size()] == ' ')) {
      p->rec.level = lv.level;
      p->msg_start = after + w.size() + (rest.size() > w.size() ? 1 : 0);
      found = true;
      break;
    }
  }
  if (!found) return false;

  size_t end = nccl_pos, start = 0;
  std::string_view tok = token_before(line, end, &start);
  const Level level = p->rec.level;
  if (level == Level::Warn || level == Level::Trace) {
    if (tok.size() > 2 && tok.front() == '(' && tok.back() == ')') {  // 2.30: file:line (func)
      if (start == 0) return false;
      end = start - 1;
      tok = token_before(line, end, &start);
    }
    if (is_file_line(tok) && !(tok.size() >= 3 && tok.front() == '[')) {
      p->rec.loc = std::string(tok);
      if (start == 0) return false;
      end = start - 1;
      tok = token_before(line, end, &start);
      if (level == Level::Trace && !tok.empty() && (is_digit(tok[0]) || tok[0] == '.')) {  // ms since init
        if (start == 0) return false;
        end = start - 1;
        tok = token_before(line, end, &start);
      }
    }
  }
  if (tok.size() >= 3 && tok.front() == '[' && tok.back() == ']' && all_digits(tok.substr(1, tok.size() - 2))) {
    p->rec.dev = static_cast<int>(to_long(tok.substr(1, tok.size() - 2)) & 0x7fffffff);
    if (start == 0) return false;
    end = start - 1;
    tok = token_before(line, end, &start);
  } else if (level != Level::Call) {
    return false;  // INFO/WARN/TRACE always carry [dev]
  }
  // tok ends with host:pid:tid; anything before the host is wrapper text.
  size_t c2 = tok.rfind(':');
  if (c2 == std::string_view::npos || !all_digits(tok.substr(c2 + 1))) return false;
  size_t c1 = c2 == 0 ? std::string_view::npos : tok.rfind(':', c2 - 1);
  if (c1 == std::string_view::npos || !all_digits(tok.substr(c1 + 1, c2 - c1 - 1))) return false;
  size_t h = c1;
  while (h > 0 && is_host_char(tok[h - 1])) --h;
  if (h == c1) return false;
  p->rec.host = std::string(tok.substr(h, c1 - h));
  p->rec.pid = to_long(tok.substr(c1 + 1, c2 - c1 - 1));
  p->rec.tid = to_long(tok.substr(c2 + 1));
  p->host_start = start + h;
  return true;
}

std::string_view rtrim(std::string_view s) {
  while (!s.empty() && (is_space(s.back()) || s.back() == '\r' || s.back() == '\n')) s.remove_suffix(1);
  return s;
}
std::string_view ltrim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  return s;
}

}  // namespace

std::string_view strip_launcher(std::string_view line, int* launcher_rank) {
  *launcher_rank = -1;
  // Open MPI --tag-output: "[1,R]<stdout>:" (maybe after a --timestamp-output date).
  for (std::string_view tag : {std::string_view("]<stdout>:"), std::string_view("]<stderr>:")}) {
    size_t t = line.substr(0, 96).find(tag);
    if (t == std::string_view::npos) continue;
    size_t open = line.rfind('[', t);
    if (open == std::string_view::npos) continue;
    std::string_view inside = line.substr(open + 1, t - open - 1);  // "1,R"
    size_t comma = inside.find(',');
    if (comma != std::string_view::npos && all_digits(inside.substr(comma + 1)))
      *launcher_rank = static_cast<int>(to_long(inside.substr(comma + 1)) & 0x7fffffff);
    return line.substr(t + tag.size());
  }
  // srun --label: "R: " (possibly right-aligned with spaces).
  std::string_view s = ltrim(line);
  size_t d = 0;
  while (d < s.size() && d < 8 && is_digit(s[d])) ++d;
  if (d > 0 && d + 1 < s.size() && s[d] == ':' && s[d + 1] == ' ') {
    *launcher_rank = static_cast<int>(to_long(s.substr(0, d)));
    return s.substr(d + 2);
  }
  return line;
}

LexedLine lex_line(std::string_view line, size_t line_no) {
  LexedLine out;
  if (line.size() > kMaxLineBytes) line = line.substr(0, kMaxLineBytes);
  line = rtrim(line);
  std::string_view body = strip_launcher(line, &out.launcher_rank);

  std::vector<Prefix> found;
  size_t pos = 0;
  while (true) {
    size_t n = body.find(" NCCL ", pos);
    if (n == std::string_view::npos) break;
    Prefix p;
    if (parse_prefix_at(body, n, &p) && (found.empty() || p.host_start >= found.back().msg_start)) {
      found.push_back(std::move(p));
      pos = found.back().msg_start;
    } else {
      pos = n + 1;
    }
  }
  for (size_t i = 0; i < found.size(); ++i) {
    Prefix& p = found[i];
    size_t msg_end = i + 1 < found.size() ? found[i + 1].host_start : body.size();
    std::string_view raw = body.substr(p.msg_start, msg_end - p.msg_start);
    p.rec.msg = std::string(rtrim(raw));
    p.rec.spliced = i + 1 < found.size();
    p.rec.cut_mid_word = p.rec.spliced && !raw.empty() && raw.back() != ' ' && raw.back() != '\t';
    p.rec.line_no = line_no;
    p.rec.launcher_rank = out.launcher_rank;
    out.records.push_back(std::move(p.rec));
  }
  if (!found.empty()) return out;

  std::string_view text = ltrim(body);
  if (text.substr(0, 13) == "NCCL version ") {  // the bare banner (grammar §2)
    Record r;
    r.line_no = line_no;
    r.launcher_rank = out.launcher_rank;
    r.level = Level::Version;
    r.msg = std::string(text);
    out.records.push_back(std::move(r));
    return out;
  }
  out.other = std::string(text);
  return out;
}

}  // namespace hpdt::nccl_log
