# Writes a file as a C array (the chat page goes into the binary):
#   cmake -DIN=page.html -DOUT=serve_page.c -P embed.cmake
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," arr "${hex}")
file(WRITE "${OUT}" "/* generated from tools/serve/page.html by tools/serve/embed.cmake */\n"
     "const char serve_page_html[] = {${arr}0};\nconst unsigned serve_page_len = ${bytes};\n")
